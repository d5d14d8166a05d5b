"""Training curves and the parity speed-up (paper Fig. 2 / §4.2), L2 norms (Fig. 11), and the plot CLIs."""
from __future__ import annotations

import json

import pytest

from evaluation import curves, plots
from evaluation.curves import Series


def write_run(directory, eval_scores, train_scores=None, restarted_from=None, finished=True):
    """A metrics.jsonl as step 3 writes it: eval/* records, and training records every 10 steps; a finished run
    also has its final model (``actor/config.json``)."""
    directory.mkdir(parents=True, exist_ok=True)
    records = list(restarted_from or [])
    for step, score in eval_scores:
        records.append({"step": step, "eval/score": score, "eval/score_std": 0.1})
        if step and train_scores is not None:
            records.append({"step": step, "objective/score": train_scores(step), "macro/advantage_l2": 1.0 / step,
                            "macro/return_l2": 2.0 / step})
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if finished:
        (directory / "actor").mkdir(exist_ok=True)
        (directory / "actor" / "config.json").write_text("{}")
    return str(directory)


def test_first_crossing_interpolates_between_evaluations():
    series = Series((0, 10, 20), (0.0, 0.5, 1.5))
    assert curves.first_crossing_step(series, 1.0) == pytest.approx(15.0)
    assert curves.first_crossing_step(series, 0.5) == 10
    assert curves.first_crossing_step(series, -1.0) == 0
    assert curves.first_crossing_step(series, 2.0) is None


def test_parity_speedup_matches_the_papers_reading_of_fig2():
    # Paper §4.2: MA-PPO reaches PPO's score at 1.7k steps, PPO at 3.7k -> ~2.2x.
    ppo = Series((0, 1000, 2000, 3000, 3700, 4600), (-0.6, 0.2, 0.5, 0.7, 0.84, 0.84))
    mappo = Series((0, 1000, 1700, 2000, 3000, 4600), (-0.6, 0.5, 0.84, 1.0, 1.3, 1.41))
    parity = curves.parity_speedup(ppo, mappo)
    assert parity.target == 0.84
    assert (parity.baseline_step, parity.method_step) == (3700, 1700)
    assert parity.speedup == pytest.approx(3700 / 1700)
    assert curves.parity_line(parity, "mappo", "ppo", 1, 1).endswith(
        "2.18x faster (paper: 1.7-2x) [n = 1 mappo, 1 ppo (seeds); one seed: no spread, no error bar]")
    assert curves.parity_line(parity, "mappo", "ppo", 3, 2).endswith("[n = 3 mappo, 2 ppo (seeds)]")


def test_parity_when_the_method_never_catches_up():
    parity = curves.parity_speedup(Series((0, 10), (0.0, 1.0)), Series((0, 10), (0.0, 0.5)))
    assert parity.method_step is None and parity.speedup is None
    assert "never reaches" in curves.parity_line(parity, "mappo", "ppo", 1, 1)
    with pytest.raises(ValueError):
        curves.parity_speedup(Series((), ()), Series((0,), (1.0,)))


def test_series_latest_run_and_mean_over_runs():
    records = [{"step": 0, "eval/score": 9.0}, {"step": 10, "eval/score": 9.0},  # an earlier, restarted run
               {"step": 0, "eval/score": 0.0}, {"step": 10, "eval/score": 1.0, "x": float("nan")},
               {"step": 10, "eval/score": 2.0}]  # a resumed run re-logs step 10
    latest = curves.latest_run(records)
    assert curves.metric_series(latest, "eval/score") == Series((0, 10), (0.0, 2.0))
    assert curves.metric_series(latest, "x") == Series((), ())
    mean, std = curves.mean_over_runs([Series((0, 10, 20), (0.0, 1.0, 2.0)), Series((0, 10), (2.0, 3.0))])
    assert mean == Series((0, 10), (1.0, 2.0)) and std == (1.0, 1.0)
    assert curves.mean_over_runs([Series((0,), (1.0,))])[1] is None
    assert curves.ema([1.0, 1.0, 4.0], weight=0.5)[:2] == (1.0, 1.0)


def test_group_runs_rejects_bad_specs():
    assert curves.group_runs(["ppo=a", "mappo=b", "ppo=c"]) == {"ppo": ["a", "c"], "mappo": ["b"]}
    with pytest.raises(ValueError, match="NAME=DIR"):
        curves.group_runs(["ppo"])


def test_curves_cli_writes_fig2_and_fig11(tmp_path, capsys):
    ppo = write_run(tmp_path / "ppo", [(0, 0.0), (10, 0.4), (20, 0.7), (30, 0.9), (40, 1.0)], lambda s: s / 40)
    mappo_1 = write_run(tmp_path / "mappo1", [(0, 0.0), (10, 0.8), (20, 1.1), (30, 1.3), (40, 1.4)], lambda s: s / 30)
    mappo_2 = write_run(tmp_path / "mappo2", [(0, 0.0), (10, 0.6), (20, 0.9), (30, 1.2), (40, 1.3)], lambda s: s / 30)
    fig2, fig11 = tmp_path / "fig2.png", tmp_path / "fig11.png"
    curves.main(["--run", f"ppo={ppo}", "--run", f"mappo={mappo_1}", "--run", f"mappo={mappo_2}",
                 "--out", str(fig2), "--norms_out", str(fig11)])
    out = capsys.readouterr().out
    assert "mappo (2 runs)" in out and "parity: mappo reaches ppo's final score 1.000" in out
    assert "x faster" in out
    assert fig2.stat().st_size > 10_000 and fig11.stat().st_size > 10_000
    with pytest.raises(SystemExit):
        curves.main(["--run", f"ppo={tmp_path / 'missing'}"])
    assert "no metrics log" in capsys.readouterr().err


def test_plots_cli_distributions_and_win_rates(tmp_path, capsys):
    for name, shift in (("sft", 0.0), ("ppo", 0.5), ("mappo", 1.0)):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"prompt": f"p{i}", "score": shift + (i % 7) / 7}) + "\n" for i in range(40)))
    out = tmp_path / "fig10.png"
    plots.main(["distributions", "--scores", *(f"{n}={tmp_path / n}.jsonl" for n in ("sft", "ppo", "mappo")),
                "--baseline", "sft", "--out", str(out)])
    assert out.stat().st_size > 10_000
    assert [title for title, _ in plots.distribution_panels({"sft": [0], "ppo": [1]}, "sft")] == ["ppo vs sft"]
    summary = {"task": "tldr", "model": "gpt-4o", "a": "mappo", "b": "ppo", "pairs": 50, "headline": "overall",
               "criteria": {"overall": {"win": 39, "tie": 2, "loss": 9, "unparseable": 0, "win_rate": 0.78,
                                        "tie_rate": 0.04, "loss_rate": 0.18}}}
    (tmp_path / "s.json").write_text(json.dumps(summary))
    plots.main(["winrates", "--summary", str(tmp_path / "s.json"), "--out", str(tmp_path / "fig4.png")])
    assert (tmp_path / "fig4.png").stat().st_size > 5_000
    (tmp_path / "bad.jsonl").write_text('{"score": 1}\n{"prompt": "x"}\n')
    with pytest.raises(SystemExit):
        plots.main(["distributions", "--scores", f"x={tmp_path / 'bad.jsonl'}", "--out", str(out)])
    assert "bad.jsonl row 2: needs a numeric 'score'" in capsys.readouterr().err


def captured_figure(monkeypatch):
    from evaluation import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    return figures


def test_one_colour_per_method_across_figures_whatever_their_order(tmp_path, monkeypatch):
    """mappo is orange in a histogram that lists it first and in a sweep that lists it second (the colour comes
    from evaluation.methods, not from the position); MA-PPO is the same method as mappo."""
    from matplotlib.colors import to_hex

    from evaluation import plots
    from evaluation.methods import METHODS, method_color, method_key

    assert method_key("MA-PPO") == method_key("ma_ppo") == method_key("MAPPO") == "mappo"
    assert method_key("Vanilla PPO") == "ppo" and method_color("MA-PPO") == METHODS["mappo"][1]
    assert method_color("my-variant") == method_color("My-Variant") not in {c for _, c in METHODS.values()}
    figures = captured_figure(monkeypatch)
    plots.plot_score_histograms([("t", {"mappo": [1.0, 2.0], "ppo": [0.5, 1.5]})], str(tmp_path / "h.png"))
    plots.plot_temperature_sweep({"ppo": {0.5: (1.0, 0.1)}, "mappo": {0.5: (2.0, 0.1)}}, str(tmp_path / "s.png"), 8)
    histogram = {patch.get_label().split()[0]: to_hex(patch.get_facecolor()) for patch in figures[0].axes[0].patches
                 if not patch.get_label().startswith("_")}
    sweep = {bars.get_label(): to_hex(bars.lines[0].get_color()) for bars in figures[1].axes[0].containers}
    assert histogram == sweep == {"mappo": METHODS["mappo"][1], "ppo": METHODS["ppo"][1]}


def test_best_of_n_figures_say_their_prompt_count_and_error_bars(tmp_path, monkeypatch):
    from evaluation import plots

    figures = captured_figure(monkeypatch)
    plots.plot_best_of_n_heatmaps({"mappo": {0.5: {1: 1.0, 2: 1.5}}}, str(tmp_path / "h.png"), 12, 4)
    plots.plot_temperature_sweep({"mappo": {0.5: (1.0, 0.1)}}, str(tmp_path / "s.png"), 12)
    assert figures[0]._suptitle.get_text().endswith("mean over 12 prompts, 4 samples each per temperature")
    assert figures[1].axes[0].get_title().endswith("12 prompts; error bars: ±1 standard error over prompts")
