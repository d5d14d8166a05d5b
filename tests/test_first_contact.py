"""What a newcomer meets first: values for ``$(...)`` alone on stdout, missing paths named in one line,
overridden flags announced, the run record in the output directory (issue: first contact)."""
import os

from dschat.utils.model import smollm2


def test_value_tool_prints_only_the_value_on_stdout(tmp_path, monkeypatch, capfd):
    """``JUDGE=$(python -m dschat.utils.model.smollm2)`` captures the directory only, even when a library prints
    a warning on stdout (DeepSpeed's accelerator warning did, on the first, converting run)."""
    def noisy_convert(out_dir):
        print("[WARNING] Setting accelerator to CPU.")  # a logger that holds sys.stdout
        os.write(1, b"native noise\n")  # C code writing to fd 1
        return tmp_path / "smollm2"

    monkeypatch.setattr(smollm2, "convert_smollm2", noisy_convert)
    smollm2.main([])
    out, err = capfd.readouterr()
    assert out == f"{tmp_path / 'smollm2'}\n"
    assert "Setting accelerator" in err and "native noise" in err
