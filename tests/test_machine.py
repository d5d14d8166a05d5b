"""The machine record every figure names (dschat.core.machine)."""
import torch

from dschat.core.machine import cpu_model, machine_line, machine_record


def test_cpu_model_reads_the_first_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU @ 1GHz\n\nmodel name\t: other\n")
    assert cpu_model(str(info)) == "Test CPU @ 1GHz"
    assert cpu_model(str(tmp_path / "missing"))  # falls back to platform, never empty


def test_machine_record_names_isa_threads_and_versions():
    record = machine_record()
    assert record["isa"] == torch.backends.cpu.get_cpu_capability()
    assert record["threads"] == torch.get_num_threads()
    assert record["torch"] == torch.__version__
    line = machine_line(record)
    assert record["cpu"] in line and record["isa"] in line and f"torch {torch.__version__}" in line
