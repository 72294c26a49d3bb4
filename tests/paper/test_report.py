"""The report renders from the database and the figures alone, with numbers from queries."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import duckdb
import pytest

from shardscope.errors import UserError
from shardscope.figures.plots import FIGURES
from shardscope.results.reference_manifest import load_manifest
from shardscope.paper.render import markdown_table, render_report

TEMPLATE = Path(__file__).resolve().parents[2] / "paper" / "report.md"


def _text(html: str) -> str:
    """The report's visible text: images dropped, tags removed, entities read, whitespace collapsed."""
    html = re.sub(r'src="data:image/png;base64,[^"]+"', "", html)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_report_is_one_self_contained_html_file_with_database_numbers(module_db, drawn, tmp_path):
    out = render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "report.html"))
    html = out.read_text()
    assert html.startswith("<!doctype html>")
    assert html.count('src="data:image/png;base64,') == len(FIGURES)
    assert "<table>" in html and "http://" not in html.replace("http://www.w3.org", "")
    with duckdb.connect(str(module_db), read_only=True) as con:
        fastest = con.execute("SELECT strategy, median_step_time_s FROM strategy_summary ORDER BY median_step_time_s LIMIT 1").fetchone()
    assert f"<strong>{fastest[0]}</strong> ({fastest[1]:.4f} s per" in html
    assert "1.60" in html  # zero3's step time relative to DDP, from the strategy_summary view


def test_mistral_memory_paragraph_is_queried_not_typed(gpu_db, drawn_gpu, module_db, drawn, tmp_path):
    """The seed article's numbers: 14 + 14 + 58 = 87 GB without the fp32 master copy, 116 GB with it, as the
    predictions stage stored them (``memory_model_cases``); a database without them says so."""
    text = _text(render_report(str(gpu_db["db"]), str(drawn_gpu), str(TEMPLATE), str(tmp_path / "r.html")).read_text())
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        rows = {master: (p, g, o, t) for master, p, g, o, t in con.execute(
            "SELECT master_weights, param_bytes, grad_bytes, optim_bytes, total_bytes FROM memory_model_cases "
            "WHERE strategy = 'ddp' AND gpus = 1").fetchall()}
    (p, g, o, total), master_total = rows[False], rows[True][3]
    assert round(total / 1e9) == 87 and round(master_total / 1e9) == 116
    assert f"{p / 1e9:.0f} GB of parameters + {g / 1e9:.0f} GB of gradients + {o / 1e9:.0f} GB of Adam states = 87 GB" in text
    assert "14 GB of parameters + 14 GB of gradients + 58 GB of Adam states" in text
    assert "116 GB with the fp32 master copy" in text
    # the decision map's table and caption: the stored cells
    # FSDP and ZeRO-3 tie; ZeRO-1/2 reduce their gradients without overlap at DeepSpeed's defaults (overlap_comm is
    # off below stage 3), so they fall outside the margin; the tied ones are taken as a set
    tie = re.search(r"mistral-7b \(7\.24 B\) fsdp \(tie with ([a-z0-9_, ]+) within", text)
    assert tie and set(tie.group(1).split(", ")) == {"zero3"}, tie
    assert "Against an 80 GB GPU (A100, H100): does not fit without the master copy, does not fit with it" in text
    source = TEMPLATE.read_text()
    assert not re.search(r"\b(87|116|58)\b", source)  # typed nowhere in the template: queried at build time
    bare = _text(render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "bare.html")).read_text())
    assert "No modeled Mistral-7B memory in the database" in bare and "Adam states =" not in bare


def test_every_figure_caption_carries_its_question_and_computed_answer(module_db, drawn, tmp_path):
    out = render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "report.html"))
    text = _text(out.read_text()).replace("&#x27;", "'")
    index = json.loads((drawn / "figures.json").read_text())["figures"]
    for entry in index:
        assert f"Figure {entry['number']}. {entry['title']}." in text
        # code spans are shown as <code> (issue 32), which _text turns into spaces like every tag
        assert re.sub(r"\s+", " ", entry["answer"].replace("`", " ")) in text, entry["name"]


def test_report_lists_reference_runs_with_their_sources(module_db, reference_db, drawn_with_reference, tmp_path):
    out = render_report(str(module_db), str(drawn_with_reference), str(TEMPLATE), str(tmp_path / "r.html"),
                        reference_db=str(reference_db))
    text = _text(out.read_text())
    for run in load_manifest():
        assert run.source_url in text and run.label in text
    assert f"Reference (not measured here): {len(load_manifest())} public" in text
    with duckdb.connect(str(reference_db), read_only=True) as con:
        plateaus = con.execute("SELECT plateau_busbw_gbps, latency_floor_us FROM verdicts").fetchall()
    for plateau, floor in plateaus:  # the interconnect table quotes each sweep's plateau and latency floor
        assert f"{plateau:.2f}" in text and f"{floor:.1f}" in text
    assert "Avg bus bandwidth\", which mostly counts" in text


def test_report_shows_the_reference_diagnosed_low_with_its_documented_cause(module_db, reference_db,
                                                                            drawn_with_reference, tmp_path):
    out = render_report(str(module_db), str(drawn_with_reference), str(TEMPLATE), str(tmp_path / "r.html"),
                        reference_db=str(reference_db))
    text = _text(out.read_text()).replace("&lt;", "<").replace("&gt;", ">")
    run = next(r for r in load_manifest() if "#293" in r.label)
    with duckdb.connect(str(reference_db), read_only=True) as con:
        reason, hints = con.execute("""SELECT v.reason, v.hints_json FROM verdicts v JOIN runs r ON r.run_id = v.judged_run_id
                                       WHERE r.label = ? AND v.verdict = 'low'""", [run.label]).fetchone()
    line = text[text.index(f"Reference diagnosed low: {run.label}"):]
    assert line.startswith(f"Reference diagnosed low: {run.label} (reference), all_reduce: {reason}.")
    assert json.loads(hints)[0] in line and "NIC only through the CPU (SYS)" in line
    assert f"Documented cause ({run.source_url}): {run.documented_cause}." in line
    assert "preset:hgx-h100 (assumed:" in text  # the preset a reference verdict assumed is said
    with duckdb.connect(str(reference_db), read_only=True) as con:
        low = con.execute("SELECT count(*) FROM verdicts WHERE verdict = 'low'").fetchone()[0]
    assert text.count("Reference diagnosed") == low >= 2  # one line per low reference run, none for the ok ones
    # a GeForce board has no PCIe peer-to-peer: its host-staged bandwidth is what the model expects, not low
    assert "Reference diagnosed low: 2 x RTX 2080 Ti" not in text


def test_report_recommends_from_measurements(module_db, drawn, tmp_path):
    text = _text(render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "r.html")).read_text())
    assert "Measured: On hostA (cpu), tiny on 2 ranks: DDP was fastest (0.0200 s per step)" in text


def test_missing_figures_are_a_user_error(module_db, tmp_path):
    with pytest.raises(UserError, match="figure index not found"):
        render_report(str(module_db), str(tmp_path / "none"), str(TEMPLATE), str(tmp_path / "r.html"))
    assert not (tmp_path / "r.html").exists()


def test_a_deleted_png_is_a_user_error(module_db, drawn, tmp_path):
    import shutil

    shutil.copytree(drawn, tmp_path / "figs")
    (tmp_path / "figs" / "decision_map.png").unlink()
    with pytest.raises(UserError, match="decision_map.png: figure not found"):
        render_report(str(module_db), str(tmp_path / "figs"), str(TEMPLATE), str(tmp_path / "r.html"))
    assert not (tmp_path / "r.html").exists()


def test_markdown_table_formats_and_blanks():
    import pandas as pd

    text = markdown_table(pd.DataFrame({"a": ["x", "y"], "b": [1.23456, None]}), {"b": "{:.2f}"})
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x | 1.23 |", "| y | – |"]
    assert markdown_table(pd.DataFrame({"a": ["<b>|"]})).splitlines()[2] == "| &lt;b&gt;&#124; |"


def test_cpu_database_says_how_to_enable_emulated_fabrics_and_has_no_modeled_steps(module_db, drawn, tmp_path):
    text = _text(render_report(str(module_db), str(drawn), str(TEMPLATE), str(tmp_path / "r.html")).read_text())
    assert "No training run on an emulated fabric is in the database. Set emulated.enabled: true" in text
    assert "No strategy predictions match a measured training run here" in text
    # The calibrated CPU check is read from the database (`calibrate-step --store` keeps it); none is stored here.
    assert "no calibration is stored in this database" in text and "calibrate-step --store fits the step model" in text
    assert "Measured here (the latest run of each sweep)" in text and "not judged" in text  # no verdicts loaded


def test_gpu_database_report_has_emulated_slowdowns_modeled_steps_and_doctor_warnings(gpu_db, drawn_gpu, tmp_path):
    text = _text(render_report(str(gpu_db["db"]), str(drawn_gpu), str(TEMPLATE), str(tmp_path / "r.html")).read_text())
    # Strategy vs fabric: each strategy's measured slowdown from its fastest to its slowest preset.
    section = text[text.index("Strategy vs fabric, measured on emulated links"):text.index("Which strategy to pick")]
    steps = {(preset, strategy): t for preset, strategy, t in gpu_db["emulated"]}
    assert (f"DDP (tiny, 2 ranks): {steps['fast', 'ddp']:.4f} s per step on fast (fastest) to"
            f" {steps['pcie_like', 'ddp']:.4f} s on pcie_like (slowest), {steps['pcie_like', 'ddp'] / steps['fast', 'ddp']:.2f}x.") in section
    assert (f"ZeRO-3 (tiny, 2 ranks): {steps['fast', 'zero3']:.4f} s per step on fast (fastest) to"
            f" {steps['pcie_like', 'zero3']:.4f} s on pcie_like (slowest),"
            f" {steps['pcie_like', 'zero3'] / steps['fast', 'zero3']:.2f}x; did not finish on nvl_groups (oom)") in section
    # Modeled beside measured: the cost model's step time for the same strategy, model and GPU count.
    with duckdb.connect(str(gpu_db["db"]), read_only=True) as con:
        modeled = dict(con.execute("SELECT strategy, step_time_s FROM strategy_predictions WHERE model = 'gpt2-small' "
                                   "AND gpus = 8").fetchall())
    assert "Modeled beside measured." in text
    for strategy, name, measured in (("ddp", "DDP", 0.05), ("zero3", "ZeRO-3", 0.08)):
        assert re.search(rf"gpuhost nvswitch gpt2-small 8 all {re.escape(name)} ok {modeled[strategy]:.4f} "
                         rf"[0-9.]+ {measured:.4f} {measured / modeled[strategy]:.2f}", text), strategy
    # The ledger: the accuracy command's numbers per op and strategy, and the ranking agreement.
    ledger = text[text.index("The cost model's own error"):text.index("Strategy vs fabric, measured on emulated links")]
    assert "shardscope accuracy --db" in ledger and "all_reduce 20" in ledger and "The model orders 1 of 1 strategy pairs" in ledger
    # Doctor: the warn/fail findings of the latest run, with what to do.
    doctor = text[text.index("Node checks"):text.index("Recommendations")]
    assert "gpuhost pcie_acs warn" in doctor and "gpuhost nccl_env warn" in doctor and "NCCL_P2P_DISABLE=1" in doctor


def test_paper_finds_the_source_trees_template_from_any_folder(tmp_path, monkeypatch):
    """``shardscope paper`` without --source, run outside the repository, renders the source tree's template."""
    from shardscope.cli import build_parser

    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(["paper", "--db", "r.duckdb", "--figures", "f", "--out", "o.html"])
    assert Path(args.source) == TEMPLATE
