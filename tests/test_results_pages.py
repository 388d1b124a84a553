"""docs/results/ is what benchmarks/results_pages.py generates, and every number on it traces back.

The tracing does not reuse the generator: it parses the committed markdown, follows each row's
``src`` to the Sources table (results files, the field expression, the paper row), re-reads those
files and benchmarks/paper/paper_numbers.csv with its own small reader, and compares with the
numbers as printed. The README scoreboard is recounted from the pages. No JAX.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import re
import statistics
import tomllib
from pathlib import Path

import numpy as np
import pytest

from conftest import load_script
from pflax.metrics import ipr_rsd

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "results"
RESULTS = REPO / "benchmarks" / "results"
PAPER_CSV = REPO / "benchmarks" / "paper" / "paper_numbers.csv"
DASH = "—"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")


def _generator():
    return load_script("benchmarks/results_pages.py")


# ---------------------------------------------------------------------------------------------
# (a) the committed pages are exactly what the generator writes
# ---------------------------------------------------------------------------------------------

def test_committed_pages_equal_the_generated_ones():
    pages = _generator().render_all()
    committed = sorted(p.name for p in DOCS.glob("*.md"))
    assert committed == sorted(pages), "docs/results/ and the generator's pages differ in name"
    stale = [name for name, text in pages.items() if (DOCS / name).read_text() != text]
    assert not stale, f"regenerate with `python benchmarks/results_pages.py`: {stale} differ"


def test_check_flag_passes_on_the_committed_pages(capsys):
    assert _generator().main(["--check"]) == 0, capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# (b) every number on the pages traces back to its results file and the paper csv
# ---------------------------------------------------------------------------------------------

def parse_tables(text: str) -> list[dict]:
    """Markdown tables as ``{"header": [...], "rows": [{column: cell}]}``."""
    tables, current = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = {"header": cells, "rows": []}
            elif all(c and set(c) <= {"-"} for c in cells):
                continue
            else:
                assert len(cells) == len(current["header"]), f"ragged table row: {line}"
                current["rows"].append(dict(zip(current["header"], cells)))
        elif current is not None:
            tables.append(current)
            current = None
    return tables


@functools.cache
def _diagnosis_mark() -> str:
    # Read once: loading the generator builds every page (about 0.6 s), and this is called once per page.
    return _generator().DIAGNOSIS_MARK


def _without_diagnosis_sections(text: str) -> str:
    """A page without its diagnosis sections (runs outside the paper's settings, left out of the totals)."""
    mark = _diagnosis_mark()
    return "\n## ".join(part for part in text.split("\n## ") if mark not in part)


def _seed(data: dict) -> int:
    """The seed a results file records (a run file's ``seed``; the earlier CLI's ``args.seed``)."""
    return data["seed"] if "seed" in data else data.get("args", {}).get("seed", 0)


def walk(data, path: str):
    for token in re.findall(r'\[[^\]]*\]|[^.\[\]]+', path):
        if token.startswith('["'):
            data = data[token[2:-2]]
        elif token.startswith("[") and "=" in token:
            key, wanted = token[1:-1].split("=")
            (data,) = [entry for entry in data if entry[key] == int(wanted)]
        elif token.startswith("[") and ":" in token:  # a slice of a list, e.g. the small clients [10:]
            start, stop = token[1:-1].split(":")
            data = data[int(start) if start else None:int(stop) if stop else None]
        elif token.startswith("["):
            data = data[int(token[1:-1])]
        else:
            data = data[token]
    return data


def read(expr: str, data) -> float:
    """``[100 * ][mean(]PATH[)]`` on one results file."""
    m = re.fullmatch(r"(100 \* )?(mean\()?(.+?)(\))?", expr)
    assert m and bool(m.group(2)) == bool(m.group(4)), f"unreadable field expression {expr!r}"
    value = walk(data, m.group(3))
    if m.group(2):
        value = sum(value) / len(value)
    return (100.0 if m.group(1) else 1.0) * value


def paper_csv() -> dict[tuple[str, ...], float]:
    with PAPER_CSV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["source"] for r in rows), "paper_numbers.csv: every row cites its table"
    return {(r["paper"], r["table"], r["setting"], r["method"], r["metric"]): float(r["value"]) for r in rows}


RUN_FILE_IN_STATUS = re.compile(r"run file `(benchmarks/paper/[^`]+\.toml)`")


def not_run_status_errors(where: str, status: str) -> list[str]:
    """A cell not run yet names its run file (which exists) and an estimate of its CPU time, or says why it
    has no run file."""
    named = RUN_FILE_IN_STATUS.search(status)
    if named:
        if not (REPO / named.group(1)).is_file():
            return [f"{where}: its run file {named.group(1)} does not exist"]
        base = re.search(r"read from the run of `(benchmarks/paper/[^`]+\.toml)` once it has finished, an evaluation "
                         r"of about [0-9.]+ (h|min) of CPU \(\d+ seeds?\)", status)
        if base and not (REPO / base.group(1)).is_file():
            return [f"{where}: the run file it is read from, {base.group(1)}, does not exist"]
        if not base and not re.search(r"about [0-9.]+ (h|min) of CPU \(\d+ seeds? x \d+ rounds\)", status):
            return [f"{where}: no CPU-time estimate in its status {status!r}"]
        return []
    if "no run file: " not in status:
        return [f"{where}: a cell not run yet names neither its run file nor why it has none: {status!r}"]
    return []


def check_page(text: str, paper: dict) -> tuple[list[str], int]:
    """(errors, numbers checked) for one page's text."""
    errors, checked = [], 0
    tables = parse_tables(text)
    sources = {r["src"]: r for t in tables if t["header"][0] == "src" for r in t["rows"]}
    results = [t for t in tables if t["header"][0] == "method"]
    if not results or not sources:
        return ["no results table or no Sources table"], 0
    used = set()
    for t in results:
        assert t["header"] == ["method", "ours", "paper", "gap", "rounds", "seeds", "status", "counted", "src"]
        for row in t["rows"]:
            where = f"{row['method']} ({row['src']})"
            src = sources.get(row["src"])
            if src is None:
                errors.append(f"{where}: no Sources row")
                continue
            used.add(row["src"])
            files = [REPO / f.strip("`") for f in src["results file(s)"].split("<br>")]
            value_expr, rounds_expr = src["value read"].strip("`"), src["rounds read"].strip("`")
            mean = None
            if row["ours"] == DASH:
                if not row["status"].startswith("not run yet") or row["seeds"] != "0" or any(f.exists() for f in files):
                    errors.append(f"{where}: no number printed, but its results file exists or status says otherwise")
                errors += not_run_status_errors(where, row["status"])
            else:
                if not all(f.is_file() for f in files):
                    errors.append(f"{where}: missing results file among {files}")
                    continue
                data = [json.loads(f.read_text()) for f in files]
                values = [float(read(value_expr, d)) for d in data]
                mean = sum(values) / len(values)
                ours = f"{mean:.2f}" + (f" ± {statistics.pstdev(values):.2f}" if len(values) > 1 else "")
                if row["ours"] != ours:
                    errors.append(f"{where}: ours printed {row['ours']}, its files give {ours}")
                if row["seeds"] != str(len(files)):
                    errors.append(f"{where}: seeds printed {row['seeds']}, {len(files)} files")
                rounds = sorted({int(read(rounds_expr, d)) for d in data})
                done = str(rounds[0]) if len(rounds) == 1 else f"{rounds[0]}–{rounds[-1]}"
                if row["rounds"].split(" / ")[0] != done:
                    errors.append(f"{where}: rounds printed {row['rounds']}, files say {done}")
                checked += 1
            value = None
            if src["paper row"] == DASH:
                if row["paper"] != DASH:
                    errors.append(f"{where}: paper number printed without a paper row")
            else:
                key = tuple(src["paper row"].split(" · "))
                if key not in paper:
                    errors.append(f"{where}: paper row {key} not in paper_numbers.csv")
                    continue
                value = paper[key]
                if row["paper"] != f"{value:.2f}":
                    errors.append(f"{where}: paper printed {row['paper']}, paper_numbers.csv has {value:.2f}")
                checked += 1
            gap = DASH if mean is None or value is None else f"{mean - value:+.2f}"
            if row["gap"] != gap:
                errors.append(f"{where}: gap printed {row['gap']}, expected {gap}")
            if row["counted"] == "yes" and gap == DASH:
                errors.append(f"{where}: counted without a gap")
    by_src = {row["src"]: row for t in results for row in t["rows"]}
    for t in (t for t in tables if t["header"][0] == "shorter run"):
        for row in t["rows"]:
            where = f"same-round row {row['shorter run']} ({row['src']})"
            cell, fedpac = by_src.get(row["src"]), sources.get(row["FedPAC src"])
            method = by_src.get(row["FedPAC src"], {}).get("method", "")
            if cell is None or fedpac is None or not (method == "FedPAC" or method.endswith("(FedPAC)")):
                errors.append(f"{where}: its src or FedPAC src is not a row of this page")
                continue
            if (cell["method"], cell["gap"], cell["rounds"].split(" / ")[0]) != (row["shorter run"], row["gap"], row["at round"]):
                errors.append(f"{where}: method, gap or round differ from its row in the results table")
                continue
            if not cell["status"].startswith(("shorter run", "in progress")) or abs(float(cell["gap"])) <= 1.5:
                errors.append(f"{where}: not a shorter run or run in progress more than 1.5 points from the paper")
            # FedPAC's file of the shorter run's seed (same data and initialisation), else its only one.
            short_files = [REPO / f.strip("`") for f in sources[row["src"]]["results file(s)"].split("<br>")]
            (seed,) = {_seed(json.loads(f.read_text())) for f in short_files}
            fedpac_files = {_seed(json.loads(f.read_text())): f
                            for f in (REPO / f.strip("`") for f in fedpac["results file(s)"].split("<br>"))}
            path = fedpac_files.get(seed, next(iter(fedpac_files.values())))
            data = json.loads(path.read_text())
            end = max(e["round"] for e in data["personalized_history"])
            then, last = (read(f"100 * mean(personalized_history[round={r}].accuracy)", data) for r in (int(row["at round"]), end))
            expected = (f"{then:.2f}", f"{last:.2f}", f"{last - then:+.2f}")
            if (row["FedPAC then"], row["FedPAC at the end"], row["FedPAC's later gain"]) != expected:
                errors.append(f"{where}: FedPAC's numbers printed differ from {path}: {expected}")
            checked += 1
    unused = set(sources) - used
    if unused:
        errors.append(f"Sources rows no table refers to: {sorted(unused)}")
    return errors, checked


@pytest.mark.parametrize("name", PAGES)
def test_every_number_traces_back(name):
    errors, checked = check_page((DOCS / name).read_text(), paper_csv())
    assert not errors, f"{name}:\n" + "\n".join(errors)
    assert checked > 0


def test_pages_exist():
    assert len(PAGES) >= 5


def _score(text: str) -> list[int]:
    """cells, within 1.0, within 1.5, complete, complete within 1.0, complete within 1.5."""
    counts = [0] * 6
    for t in parse_tables(text):
        if t["header"][0] != "method":
            continue
        for row in t["rows"]:
            if row["counted"] != "yes":
                continue
            gap, complete = abs(float(row["gap"])), row["status"].startswith("complete")
            for i, hit in enumerate((True, gap <= 1.0, gap <= 1.5)):
                counts[i] += hit
                counts[3 + i] += hit and complete
    return counts


def test_readme_scoreboard_recounts_from_the_pages():
    (board,) = [t for t in parse_tables((DOCS / "README.md").read_text()) if t["header"][0] == "page"]
    columns = ["cells", "within 1.0", "within 1.5", "complete runs", "complete, within 1.0", "complete, within 1.5"]
    total = [0] * 6
    listed = []
    for row in board["rows"]:
        printed = [int(row[c]) for c in columns]
        if row["page"] == "**all pages**":
            assert printed == total, "the README's total row"
            continue
        name = re.fullmatch(r"\[(.+)\]\((.+)\)", row["page"]).group(2)
        listed.append(name)
        counts = _score((DOCS / name).read_text())
        assert printed == counts, f"README scoreboard row of {name}: {printed} != recount {counts}"
        total = [a + b for a, b in zip(total, counts)]
    assert sorted(listed) == PAGES


# ---------------------------------------------------------------------------------------------
# the tracing catches an edited page
# ---------------------------------------------------------------------------------------------

def _edit_cell(text: str, method: str, column: str, new: str) -> str:
    """``text`` with one results-table cell replaced (first row whose method matches)."""
    lines = text.splitlines(keepends=True)
    header = None
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            header = None
            continue
        cells = line.strip().strip("|").split("|")
        if header is None:
            header = [c.strip() for c in cells]
            continue
        if header[0] == "method" and cells[0].strip() == method:
            cells[header.index(column)] = f" {new} "
            lines[i] = "|" + "|".join(cells) + "|\n"
            return "".join(lines)
    raise AssertionError(f"no row {method!r}")


@pytest.mark.parametrize("column,new", [("ours", "91.63"), ("paper", "91.84"), ("gap", "-0.20"), ("seeds", "7")])
def test_an_edited_number_is_caught(column, new):
    text = (DOCS / "fedpac_table1.md").read_text()
    edited = _edit_cell(text, "FedPAC", column, new)
    assert edited != text
    assert check_page(text, paper_csv())[0] == []
    assert check_page(edited, paper_csv())[0], f"an edited {column} went unnoticed"


def _a_same_round_page(folder: Path) -> tuple[str, list[str]]:
    """A page with a shorter run far from the paper beside a complete FedPAC run, and its same-round row (as
    its cells), over two results files written in ``folder``: the committed pages need not have one."""
    def history(accuracies: dict[int, float]) -> list[dict]:
        return [{"round": r, "accuracy": [a, a]} for r, a in accuracies.items()]

    short = {"seed": 0, "rounds_completed": 10, "final_accuracy": {"mean": 80.0},
             "personalized_history": history({10: 0.80})}
    fedpac = {"seed": 0, "rounds_completed": 200, "final_accuracy": {"mean": 91.5},
              "personalized_history": history({10: 0.865, 200: 0.915})}
    for name, data in (("short.json", short), ("fedpac.json", fedpac)):
        (folder / name).write_text(json.dumps(data))
    paper = paper_csv()
    key = ("FedPAC", "1", "FMNIST/20clients_frac1.0")
    gap = f"{80.0 - paper[(*key, 'pFedMe', 'acc')]:+.2f}"
    same_round = ["pFedMe", "s1", "10", gap, "86.50", "91.50", "+5.00", "s2"]
    lines = [
        "| method | ours | paper | gap | rounds | seeds | status | counted | src |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| pFedMe | 80.00 | {paper[(*key, 'pFedMe', 'acc')]:.2f} | {gap} | 10 / 200 | 1 | shorter run | yes | s1 |",
        f"| FedPAC | 91.50 | {paper[(*key, 'FedPAC', 'acc')]:.2f} | {91.5 - paper[(*key, 'FedPAC', 'acc')]:+.2f} "
        "| 200 / 200 | 1 | complete | yes | s2 |", "",
        "| shorter run | src | at round | gap | FedPAC then | FedPAC at the end | FedPAC's later gain | FedPAC src |",
        "|---|---|---|---|---|---|---|---|",
        "| " + " | ".join(same_round) + " |", "",
        "| src | results file(s) | value read | rounds read | paper row | command(s) | trained on |",
        "|---|---|---|---|---|---|---|"]
    for src, name, method in (("s1", "short.json", "pFedMe"), ("s2", "fedpac.json", "FedPAC")):
        lines.append(f"| {src} | `{folder / name}` | `final_accuracy.mean` | `rounds_completed` | "
                     f"{' · '.join((*key, method, 'acc'))} | — | cpu |")
    return "\n".join(lines) + "\n", same_round


@pytest.mark.parametrize("column, edit", [(4, lambda v: f"{float(v) + 0.01:.2f}"),  # FedPAC then
                                          (2, lambda v: str(int(v) + 10)),  # at round
                                          (7, lambda v: "s1" if v != "s1" else "s2")])  # FedPAC src
def test_an_edited_same_round_row_is_caught(column, edit, tmp_path):
    text, cells = _a_same_round_page(tmp_path)
    assert check_page(text, paper_csv()) == ([], 5), "the page built for the edits does not check"
    old = "| " + " | ".join(cells) + " |"
    changed = list(cells)
    changed[column] = edit(cells[column])
    edited = text.replace(old, "| " + " | ".join(changed) + " |", 1)
    assert edited != text
    assert check_page(edited, paper_csv())[0], f"{changed!r} went unnoticed"


def test_a_wrong_field_is_caught():
    text = (DOCS / "fedpac_table1.md").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("| s15 |")]  # FedPAC, 20 clients
    assert "| `final_accuracy.mean` |" in line
    edited = text.replace(line, line.replace("| `final_accuracy.mean` |", "| `final_accuracy.worst` |"))
    assert edited != text
    assert check_page(edited, paper_csv())[0]


# ---------------------------------------------------------------------------------------------
# cells not run yet: run files, estimates and the README's cost table
# ---------------------------------------------------------------------------------------------

def test_every_run_file_of_the_tables_has_a_row():
    """Every run file under benchmarks/paper/ is some page's cell (with a row naming it), so a run that
    lands is shown; a run file that is not a paper cell would be listed here."""
    gen = _generator()
    named = {row.run_file for page in gen.PAGES for section in page.sections for row in section.rows
             if row.run_file and not row.missing}
    files = {p.relative_to(REPO / "benchmarks" / "paper").as_posix()
             for p in (REPO / "benchmarks" / "paper").glob("*/*/*.toml")}
    # the earlier folders read their results through other rows (old flags, repeated cells)
    earlier = {f for f in files if f.startswith(("fedpac/table1_fmnist/", "fedpac/fedpac_fmnist/"))}
    assert named <= files, f"rows name run files that do not exist: {sorted(named - files)}"
    # FedPick's run files write one results file per seed, and each is cited by the Sources row reading it;
    # one with no results yet is named by its cell's row.
    fedpick = {f for f in files if f.startswith("fedpick/")}
    pages = "".join(p.read_text() for p in (REPO / "docs" / "results").glob("*.md"))
    assert not {f for f in fedpick - named
                if f"`python benchmarks/fedpick_domains.py benchmarks/paper/{f} --seeds" not in pages}
    assert files - earlier - fedpick <= named, f"run files no page shows: {sorted(files - earlier - fedpick - named)}"


def test_cpu_estimate_scales_with_seeds_clients_and_models():
    gen = _generator()
    one = gen.cpu_estimate("fedpac/table2_fmnist/none.toml")
    three = gen.cpu_estimate("fedpac/table2_fmnist/both.toml")
    assert (one["seeds"], three["seeds"], three["seed_list"]) == (1, 3, [0, 1, 2])
    assert three["seconds"] == pytest.approx(3 * one["seconds"])  # same method and setting
    t20 = gen.cpu_estimate("fedpac/table3_fmnist/fedbabu.toml")["seconds"]
    t100 = gen.cpu_estimate("fedpac/table1_fmnist_100clients/fedbabu.toml")
    # 30 clients train per round instead of 20; the 100-client cell lists three seeds, the other one
    assert t100["seconds"] / t100["seeds"] == pytest.approx(1.5 * t20)
    m3 = gen.cpu_estimate("fedpac/table1_fmnist_100clients/fedem__m_3.toml")["seconds"]
    m5 = gen.cpu_estimate("fedpac/table1_fmnist_100clients/fedem__m_5.toml")
    assert m5["seeds"] == 3 and m5["seconds"] / m5["seeds"] == pytest.approx(5 / 3 * m3)  # M = 3 lists one seed
    # FedEM-FT fine-tunes every evaluated client for 5 epochs at each evaluation (every 10 rounds)
    ft100 = gen.cpu_estimate("fedpac/table1_fmnist_100clients/fedem_ft__m_3.toml")["seconds"]
    assert ft100 == pytest.approx((1 + 100 / 30 / 10) * m3)
    ft20 = gen.cpu_estimate("fedpac/table1_fmnist/fedem_ft__m_3.toml")["seconds"]
    assert ft20 == pytest.approx(1.1 * gen.cpu_estimate("fedpac/table1_fmnist/fedem__m_3.toml")["seconds"])
    # read from FedEM's run instead, FedEM-FT costs one evaluation: 100 clients fine-tuned 5 epochs each, as
    # 100 / 30 rounds of FedEM's training
    row = gen.Row("FedEM-FT (M=3)", ("table1_fmnist_100clients/fedem_ft__m_3/from_fedem__m_3.json",), gen.LAST_EVAL,
                  None, kind="fedavg_eval", run_file="fedpac/table1_fmnist_100clients/fedem_ft__m_3.toml")
    assert gen.variant_base(row) == "fedpac/table1_fmnist_100clients/fedem__m_3.toml"
    assert gen.variant_estimate(row) == pytest.approx(m3 / 200 * 100 / 30)
    assert gen.variant_base(dataclasses.replace(row, kind="pflax")) is None
    # a client pays for its real minibatches only (padding is skipped): the mean client's size sets the cost
    t8 = gen.cpu_estimate("fedpac/table8_fmnist/ditto.toml")["seconds"]  # Dir(1.0): 60,000 images, 100 clients
    assert t8 == pytest.approx(gen.cpu_estimate("fedpac/table1_fmnist_100clients/ditto.toml")["seconds"])
    t6 = gen.cpu_estimate("fedpac/table6_fmnist/fedrep.toml")  # sizes drawn from {300, 600, 1200}
    assert t6["seconds"] / t6["seeds"] == pytest.approx(700 / 600 * gen.cpu_estimate("fedpac/table1_fmnist/fedrep.toml")["seconds"])
    assert gen.fmt_duration(90) == "2 min" and gen.fmt_duration(5400) == "1.5 h"


def test_cpu_estimate_ignores_a_round_that_was_paused(tmp_path, monkeypatch):
    """A round's seconds are wall time, so a process paused mid-round (or a compile) reads long; the
    estimate uses the typical round and evaluation."""
    gen = _generator()
    history = [{"round": r, "seconds": 28.0} for r in range(1, 101)]
    for r in range(9, 100, 10):
        history[r]["eval_seconds"] = 2.0
    (tmp_path / "steady.json").write_text(json.dumps({"rounds_completed": 100, "history": history}))
    history[40]["seconds"] = 1275.0  # SIGSTOP'd for 20 minutes
    history[0]["seconds"] = 95.0  # the first round compiles
    history[49]["eval_seconds"] = 600.0
    (tmp_path / "paused.json").write_text(json.dumps({"rounds_completed": 100, "history": history}))
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    monkeypatch.setattr(gen, "TIMING_REFERENCE", {"steady": "steady.json", "paused": "paused.json"})
    assert gen._seconds_per_round("steady") == pytest.approx(28.2)
    assert gen._seconds_per_round("paused") == pytest.approx(28.2)


def test_fedpick_files_time_only_the_rounds_their_last_process_ran():
    """A FedPick benchmark file's ``seconds`` are the wall time of the process that finished it, so a run
    resumed at round 250 of 300 timed 50 rounds, not 300; one seed costs that pace times its rounds."""
    gen = _generator()
    fresh = {"rounds": 300, "seconds": 840.0}
    resumed = {"rounds": 300, "seconds": 140.0, "resumed_at_rounds": [100, 250]}
    assert gen.measured_seconds_per_round(fresh) == pytest.approx(2.8)
    assert gen.measured_seconds_per_round(resumed) == pytest.approx(2.8)
    assert gen.measured_seconds_per_seed(fresh) == pytest.approx(840.0)
    assert gen.measured_seconds_per_seed(resumed) == pytest.approx(840.0)
    assert gen.measured_seconds_per_seed({"rounds": 300}) is None


def test_fedpick_estimate_takes_its_arms_longest_cpu_runs_at_its_width(tmp_path, monkeypatch):
    """A FedPick run file's pace: its own folder's CPU runs when it has any; else the arm's longest CPU runs
    at the same CNN width (a 30-round file's seconds are mostly compile); never a GPU's or another width's."""
    gen = _generator()
    results = tmp_path / "benchmarks" / "results"
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "RESULTS", results)
    monkeypatch.setattr(gen, "RUN_FILES", tmp_path / "paper")
    gpu = [{"from_round": 0, "backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}]
    files = {"fedpick_domains/lg_fedavg_seed0.json": {"rounds": 30, "seconds": 300.0, "width": 0.125},
             "fedpick_domains_usps_300/lg_fedavg_seed0.json": {"rounds": 300, "seconds": 600.0, "width": 0.125},
             "fedpick_domains_usps_300/lg_fedavg_seed1.json": {"rounds": 300, "seconds": 900.0, "width": 0.125},
             "fedpick_domains_usps_300/lg_fedavg_seed2.json": {"rounds": 300, "seconds": 960.0, "width": 0.125},
             "fedpick_domains_gpu/lg_fedavg_seed0.json": {"rounds": 300, "seconds": 30.0, "width": 0.125,
                                                          "sessions": gpu},
             "fedpick_domains_width1/lg_fedavg_seed0.json": {"rounds": 30, "seconds": 3000.0, "width": 1.0}}
    for name, data in files.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(json.dumps(data))
    (tmp_path / "paper" / "t").mkdir(parents=True)

    def estimate(out, width):
        (tmp_path / "paper" / "t" / "arm.toml").write_text(
            f'arm = "lg_fedavg"\nalgorithm = "lg_fedavg"\nseeds = [0, 1]\nrounds = 300\n'
            f'out = "benchmarks/results/{out}"\n[model]\nwidth = {width}\n')
        return gen.cpu_estimate("t/arm.toml")["seconds"]

    assert estimate("fedpick_domains_new", 0.125) == pytest.approx(2 * 300 * 3.0)  # median of 2.0, 3.0, 3.2
    assert estimate("fedpick_domains", 0.125) == pytest.approx(2 * 300 * 10.0)  # its own folder's run
    assert estimate("fedpick_domains_new", 1.0) == pytest.approx(2 * 300 * 100.0)
    assert math.isnan(estimate("fedpick_domains_new", 0.5))


def test_the_fedpick_300_note_names_the_seeds_a_cpu_trained(tmp_path, monkeypatch):
    """The MNIST 300-round section says which seeds the CPU ran, from each file's ``sessions``, and drops the
    clause when the GPU ran them all."""
    gen = _generator()
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    gpu = [{"from_round": 0, "backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}]
    cpu = [{"from_round": 0, "backend": "cpu", "device_kind": "cpu"}]
    (tmp_path / "runs").mkdir()
    for arm, seed, sessions in (("fedavg", 0, gpu), ("fedavg", 2, cpu), ("single", 2, cpu), ("single", 0, cpu),
                                ("fedpick", 1, gpu + cpu), ("fedbn", 0, [])):
        (tmp_path / "runs" / f"{arm}_seed{seed}.json").write_text(
            json.dumps({"arm": arm, "seed": seed, "sessions": sessions}))
    assert gen._cpu_seeds("runs") == "SingleSet (0, 2), FedAvg (2)"  # a run the GPU helped is not a CPU run
    # Another table's arm in the same folder is named only by that table's labels.
    (tmp_path / "runs" / "wo_ent_seed1.json").write_text(json.dumps({"arm": "wo_ent", "seed": 1, "sessions": cpu}))
    assert gen._cpu_seeds("runs") == "SingleSet (0, 2), FedAvg (2)"
    assert gen._cpu_seeds("runs", {"wo_ent": "w/o L_ent", "fedavg": "FedAvg"}) == "w/o L_ent (1), FedAvg (2)"
    (tmp_path / "gpu_only").mkdir()
    (tmp_path / "gpu_only" / "fedavg_seed0.json").write_text(json.dumps({"arm": "fedavg", "seed": 0, "sessions": gpu}))
    assert gen._cpu_seeds("gpu_only") == ""


def test_readme_says_none_where_nothing_is_left_to_run():
    """A scoreboard over pages with every cell run to the paper's length, none far from it, says so in its three
    lists, rather than printing a total row of zeros (which read "1 min", the duration's floor) or a table of a
    header alone."""
    gen = _generator()
    (page,) = [p for p in gen.PAGES if p.slug == "fedpac_table2"]
    rendered = gen.render_page(page, gen.paper_numbers())
    assert not gen.not_run([c for _, cells in rendered.sections for c in cells])["cells"]
    assert not [c for section, cells in rendered.sections for c, _ in gen.far_and_diagnosed(section, cells)]
    readme = gen.render_readme([rendered])
    for sentence, heading in ((gen.NO_CELLS_NOT_RUN, "Cells not run yet"),
                              (gen.NO_SHORTER_RUNS, "Cells shorter than the paper's run"),
                              (gen.NO_FAR_CELLS, "Cells more than 1.5 points from the paper")):
        section = _section_of(readme, heading)
        assert sentence in section and "**all pages**" not in section and "|" not in section, heading


def test_readme_cost_table_adds_up():
    """The README's table of cells not run yet adds up and agrees with each page; with none left, the section
    says so instead of a table of zeros, and no page has such a cell."""
    readme = (DOCS / "README.md").read_text()
    tables = [t for t in parse_tables(readme) if "cells not run yet" in t["header"]]
    section = _section_of(readme, "Cells not run yet")
    if _generator().NO_CELLS_NOT_RUN in section:
        assert not tables
        for name in PAGES:
            assert not [row for t in parse_tables(_without_diagnosis_sections((DOCS / name).read_text()))
                        if t["header"][0] == "method" for row in t["rows"]
                        if row["ours"] == DASH and "repeated from" not in row["status"]], name
        return
    (cost,) = tables
    total = cost["rows"][-1]
    assert total["results page"] == "**all pages**"
    for column in ("cells not run yet", "with a run file", "without one"):
        assert int(total[column]) == sum(int(r[column]) for r in cost["rows"][:-1])
    for r in cost["rows"][:-1]:
        name = re.fullmatch(r"\[(.+)\]\((.+)\)", r["results page"]).group(2)
        rows = [row for t in parse_tables(_without_diagnosis_sections((DOCS / name).read_text()))
                if t["header"][0] == "method"
                for row in t["rows"] if row["ours"] == DASH and "repeated from" not in row["status"]]
        assert len(rows) == int(r["cells not run yet"]), name
        assert sum("no run file: " in row["status"] for row in rows) == int(r["without one"]), name


def test_readme_reach_if_every_cell_not_run_lands_within_recounts_from_the_pages():
    """The README's "were every cell not run yet to land within" count, recounted from the pages: in every
    counted section, a cell not run yet with a paper number counts as within, and a counted cell with the same
    paper row (its shorter run) drops out; a counted cell in progress or shorter than the paper's run counts as
    within; every other counted cell keeps its printed gap."""
    sentence = re.search(r"the scoreboard would count (\d+) of (\d+) cells within 1\.5 points \(([0-9.]+) %\)",
                         (DOCS / "README.md").read_text())
    assert sentence, "the README lost its count of what the cells not run yet could reach"
    within = cells = 0
    for name in PAGES:
        text = (DOCS / name).read_text()
        paper_row = {r["src"]: r["paper row"] for t in parse_tables(text) if t["header"][0] == "src" for r in t["rows"]}
        counted_sections = [part for part in text.split("\n## ")[1:] if "Not counted in the scoreboard" not in part]
        rows = [row for part in counted_sections for t in parse_tables(part) if t["header"][0] == "method"
                for row in t["rows"]]
        not_run = [row for row in rows if row["status"].startswith("not run yet") and row["paper"] != DASH]
        replaced = {paper_row[row["src"]] for row in not_run}
        kept = [row for row in rows if row["counted"] == "yes" and paper_row[row["src"]] not in replaced]
        within += len(not_run) + sum(row["status"].startswith(("in progress", "shorter run"))
                                     or abs(float(row["gap"])) <= 1.5 for row in kept)
        cells += len(not_run) + len(kept)
    assert (int(sentence.group(1)), int(sentence.group(2))) == (within, cells)
    assert sentence.group(3) == f"{100 * within / cells:.1f}"


def test_readme_table_of_unfinished_cells_adds_up():
    """Every shorter run and run in progress of a page is in the README's count, with the CPU time it needs
    to reach its length printed in its status, unless a later run of the same cell is planned: that run's
    cell, not run yet, is on the page with its run file and carries the time; the totals add up. With none
    left, the section says so instead of a table of zeros."""
    readme = (DOCS / "README.md").read_text()
    tables = [t for t in parse_tables(readme) if "shorter or in progress" in t["header"]]
    section = _section_of(readme, "Cells shorter than the paper's run")
    none_left = _generator().NO_SHORTER_RUNS in section
    assert none_left == (not tables)
    listed = {}
    if not none_left:
        (short,) = tables
        total = short["rows"][-1]
        assert total["results page"] == "**all pages**"
        for column in ("shorter or in progress", "with an estimate"):
            assert int(total[column]) == sum(int(r[column]) for r in short["rows"][:-1])
        listed = {re.fullmatch(r"\[(.+)\]\((.+)\)", r["results page"]).group(2): r for r in short["rows"][:-1]}
    for name in PAGES:
        rows = [row for t in parse_tables(_without_diagnosis_sections((DOCS / name).read_text()))
                if t["header"][0] == "method"
                for row in t["rows"] if row["status"].startswith(("shorter run", "in progress"))
                and "repeated from" not in row["status"] and "superseded by" not in row["status"]]
        text = (DOCS / name).read_text()
        planned = [row for row in rows if "its run at the paper's length" in row["status"]]
        for row in planned:
            later = re.search(r"its run at the paper's length \(`benchmarks/results/(.+?)`\) is not run yet",
                              row["status"]).group(1)
            assert re.search(rf"\| `benchmarks/results/{re.escape(later)}` \|[^\n]*`python benchmarks/paper/run_table.py ",
                             text), (name, later)
        rows = [row for row in rows if row not in planned]
        assert len(rows) == int(listed[name]["shorter or in progress"]) if rows else name not in listed, name
        for row in rows:
            target = re.search(r"(\d+) of (?:the paper's )?(\d+) rounds", row["status"]).group(2)
            assert re.search(rf"about [0-9.]+ (h|min) of CPU to reach {target} rounds", row["status"]), row


def test_time_to_the_paper_length_resumes_from_a_packed_checkpoint(tmp_path):
    """A run in progress resumes on a fresh clone from the packed checkpoint committed beside its results file
    and needs only the rounds after it; without one (checkpoint folders are not committed) it starts again,
    as a finished shorter run does."""
    from pflax import checkpoint
    from pflax.core.federated import State

    import jax

    gen = _generator()
    history = [{"round": r, "seconds": 10.0} for r in range(1, 56)]
    section = gen.Section("demo", (), paper_rounds=200)
    state = State.create(jax.random.PRNGKey(0), {}, {}, 2, None, None).replace(round=50)
    checkpoint.save(tmp_path / "packed" / "checkpoints", state)
    checkpoint.pack(tmp_path / "packed" / "checkpoints", tmp_path / "packed" / "checkpoint.tar.gz")
    for name, planned, seconds in (("packed", 200, 150 * 10.0), ("unpacked", 200, 200 * 10.0),
                                   ("shorter", 55, 200 * 10.0)):
        path = tmp_path / name / "results.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"rounds_completed": 55, "history": history,
                                    "run": {"rounds": planned, "checkpoint_every": 10}}))
        cell = gen.Cell(None, "s1", [path], "", "", rounds=[55], planned=[planned])
        assert gen._to_go(cell.files, cell.planned, None, section.paper_rounds) == {path: pytest.approx(seconds)}, name
        assert gen.resumes_from(path) == (50 if name == "packed" else 0)
    fedpick = tmp_path / "fedpick_seed0.json"
    fedpick.write_text(json.dumps({"rounds": 30, "seconds": 300.0}))
    cell = gen.Cell(None, "s1", [fedpick], "", "", rounds=[30], planned=[30])
    assert gen._to_go([fedpick], cell.planned, None, 300) == {fedpick: pytest.approx(3000.0)}


def test_a_gpu_trained_run_is_timed_by_the_cpu_estimate_not_its_own_rounds(tmp_path, monkeypatch):
    """A GPU's seconds per round say nothing of a CPU's: a run in progress that a GPU trained (even in part)
    needs the cell's CPU estimate per round to reach the paper's length, and a GPU-trained finished seed does
    not time the seeds not run yet; a CPU-trained run keeps its own timing."""
    gen = _generator()
    real = gen.expand
    monkeypatch.setattr(gen, "expand", lambda pattern: sorted(tmp_path.glob(f"{pattern}/seed*/results.json"))
                        if pattern.startswith("cell") else real(pattern))
    run_file = "fedpac/table10_fmnist/ditto.toml"  # seeds 0, 1, 2; 200 rounds
    estimate = gen.cpu_estimate(run_file)
    per_round = estimate["seconds"] / (estimate["seeds"] * estimate["rounds"])
    gpu = [{"from_round": 0, "backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}]
    cpu = [{"from_round": 0, "backend": "cpu", "device_kind": "cpu"}]
    history = [{"round": r, "seconds": 2.0} for r in range(1, 201)]
    for cell, sessions, rounds in (("cell_gpu_running", gpu, 70), ("cell_cpu_running", cpu, 70),
                                   ("cell_gpu_finished", gpu, 200), ("cell_mixed_finished", gpu + cpu, 200)):
        path = tmp_path / cell / "seed0" / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({
            "seed": 0, "rounds_completed": rounds, "run": {"rounds": 200}, "command": "demo",
            "final_accuracy": {"mean": 80.0}, "history": history[:rounds], "sessions": sessions,
            "personalized_history": [{"round": rounds, "accuracy": [0.8]}]}))
    rows = tuple(gen.Row(name, (name,), gen.FINAL, None, run_file=run_file)
                 for name in ("cell_gpu_running", "cell_cpu_running", "cell_gpu_finished", "cell_mixed_finished"))
    (gpu_running, cpu_running, gpu_finished, mixed), _ = gen.read_section(
        gen.Section("demo", rows, paper_rounds=200), {}, [])
    assert gpu_running.to_go_s == pytest.approx(200 * per_round)  # no pack: it starts again, on a CPU
    assert cpu_running.to_go_s == pytest.approx(200 * 2.0)
    for finished in (gpu_finished, mixed):
        assert finished.missing_seeds == [1, 2]
        assert finished.missing_seeds_s == pytest.approx(2 * estimate["seconds"] / estimate["seeds"])


def test_a_superseded_row_is_shown_but_not_counted(monkeypatch):
    gen = _generator()
    (section,) = [s for s in gen.FEDPAC_TABLE2.sections if s.title.startswith("The earlier runs, each arm")]
    row = section.rows[0]
    assert row.superseded_by == "table2_fmnist/none"
    real = gen.expand
    # The first arm superseded (by any files), the second not (whatever runs its 200-round cell has now).
    monkeypatch.setattr(gen, "expand", lambda pattern: real("fedpac_fmnist/none") if pattern == row.superseded_by
                        else [] if pattern == section.rows[1].superseded_by else real(pattern))
    cells, _ = gen.read_section(section, gen.paper_numbers(), [])
    assert cells[0].superseded and not gen.counted(cells[0], section)
    assert "superseded by `benchmarks/results/table2_fmnist/none`" in cells[0].status
    assert not cells[1].superseded and gen.counted(cells[1], section)
    # A superseded run needs no more rounds (its later run has them): no CPU time to go, in its status or
    # in the scoreboard's total of unfinished runs. Nor does one whose later run is only planned: that run's
    # own cell, not run yet, carries the time, which would otherwise be counted twice.
    assert cells[0].to_go is None and "of CPU to reach" not in cells[0].status
    assert cells[1].to_go is None and "of CPU to reach" not in cells[1].status
    assert (f"its run at the paper's length (`benchmarks/results/{section.rows[1].superseded_by}`) is not run yet"
            in cells[1].status)
    assert gen.unfinished(cells)["cells"] == 0


def test_a_fedpick_run_at_the_paper_length_supersedes_the_short_run_in_every_domain_section():
    """One FedPick run scores every domain, so its 300-round run supersedes the 30-round run's rows in the
    MNIST-M and mean sections too, not only in the counted MNIST one: otherwise the scoreboard's total of
    unfinished runs would count the 30-round runs' time to 300 rounds beside the 300-round runs' own."""
    gen = _generator()
    sections = [s for s in gen.FEDPICK_TABLE2.sections
                if s.title in ("MNIST", "MNIST-M (our stand-in)", "Mean over our five domains")]
    assert len(sections) == 3
    for section in sections:
        assert [r.superseded_by for r in section.rows] == [
            f"fedpick_domains_300/{arm}_seed*.json" for _, arm in gen._T2_ARMS]
        cells, _ = gen.read_section(section, gen.paper_numbers(), [])
        assert gen.unfinished(cells)["cells"] == 0, section.title
        for cell in cells:
            assert cell.to_go is None and "of CPU to reach" not in cell.status, (section.title, cell.row.label)


def test_table4_ablations_are_superseded_by_their_300_round_runs_but_w_o_lce_is_not():
    """Table IV's 30-round ablations point at their 300-round runs (``fedpick_table4_digits_300/``), and its
    FedPick and w/o PFSM rows at Table II's, so no section counts the 30-round runs' time to 300 rounds; w/o
    L_lce ran 300 rounds from the start, has no later run, and so stays in the projection of cells not run."""
    gen = _generator()
    mnist = next(s for s in gen.FEDPICK_TABLE4.sections if s.title == "MNIST")
    later = {r.method: r.superseded_by for r in mnist.rows}
    assert later.pop("w/o L_lce") is None
    assert later == {label: f"fedpick_domains_300/{arm}_seed*.json" for label, arm in
                     [("FedPick", "fedpick"), ("w/o PFSM", "fedbn")] + list(gen._T4_ARMS_30)}
    cells, _ = gen.read_section(mnist, gen.paper_numbers(), [])
    assert gen.unfinished(cells)["cells"] == 0
    (long,) = [s for s in gen.FEDPICK_TABLE4.sections if s.title == "MNIST, the paper's 300 rounds"]
    for row in long.rows:
        table = "fedpick_table2_digits_300" if row.repeat_of else "fedpick_table4_digits_300"
        arm = row.files[0].split("/")[1].removesuffix("_seed*.json")
        assert row.run_file == f"fedpick/{table}/{arm}.toml" and row.paper[1] == "IV"
        assert (REPO / "benchmarks" / "paper" / row.run_file).is_file()
    assert [r.method for r in long.rows if r.repeat_of] == ["FedPick", "w/o PFSM"]


def test_the_t6_pfedhn_note_splits_the_cells_gap_into_table1s_and_the_move_between_tables():
    """Table 6's pFedHN note: its Table 1 gap and the two pFedHNs' moves from Table 1 add up to the cell's gap,
    each read back from the results files and the paper's numbers."""
    gen = _generator()
    text = (DOCS / "fedpac_table6.md").read_text()
    ours, paper = gen._mean_final("table6_fmnist/pfedhn"), gen.paper_numbers()
    here = paper[("FedPAC", "6", gen.T6_SETTING, "pFedHN", "acc")]
    if abs(ours - here) <= gen.FAR:
        assert "**pFedHN** ends" not in text
        return
    parts = re.search(r"so of the gap here, ([+-][\d.]+) is Table 1's and ([+-][\d.]+) the two pFedHNs", text)
    there = gen._mean_final("table1_fmnist/pfedhn") - paper[("FedPAC", "1", gen.FMNIST20, "pFedHN", "acc")]
    assert float(parts.group(1)) == round(there, 2)
    assert abs(float(parts.group(1)) + float(parts.group(2)) - (ours - here)) < 0.011
    assert f"**pFedHN** ends {abs(ours - here):.2f} points {'above' if ours > here else 'under'} the paper" in text


def test_seeds_not_run_follow_the_tables_order_of_methods(tmp_path, monkeypatch):
    """A FedPick section's list of seeds without results names its methods in the table's order, not the run
    files' alphabetical one, and leaves out the seeds whose files exist."""
    gen = _generator()
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "fedavg_seed1.json").write_text("{}")
    table2 = gen._seeds_not_run("runs", "fedpick_table2_digits_300")
    assert table2.startswith("SingleSet (0, 1, 2), FedAvg (0, 2), FedProx (0, 1, 2), FedPer")
    assert table2.endswith("FedBN (0, 1, 2), FedPick (0, 1, 2)")
    labels = {arm: label for label, arm in gen._T4_ARMS_30}
    assert gen._seeds_not_run("runs", "fedpick_table4_digits_300", labels) == ", ".join(
        f"{label} (0, 1)" for label, _ in gen._T4_ARMS_30)


def test_readme_headline_scoreboard_is_current():
    """The README's one-line scoreboard repeats the total row of docs/results/README.md for the cells whose
    runs are complete (a run in progress gives a provisional cell, which the headline leaves out)."""
    line = re.search(r"\| every paper cell run to the paper's length \| (\d+) of (\d+) within 1\.5 points \|",
                     (REPO / "README.md").read_text())
    assert line, "the README's headline table lost its scoreboard line"
    (board,) = [t for t in parse_tables((DOCS / "README.md").read_text()) if t["header"][0] == "page"]
    (total,) = [row for row in board["rows"] if row["page"] == "**all pages**"]
    assert (int(line.group(1)), int(line.group(2))) == (int(total["complete, within 1.5"]),
                                                        int(total["complete runs"]))


def test_hypotheses_in_use_tables_agree_with_the_results_files():
    """Every "Hypotheses in use" row, recomputed from its results file: the hypothesis each client's lowest
    loss picks (``last_round.cluster_losses``; FedEM: its largest mixture weight, ``last_round.pi``), the
    clients per hypothesis and their mean final accuracy."""
    for name in PAGES:
        tables = parse_tables((DOCS / name).read_text())
        sources = {r["src"]: r for t in tables if t["header"][0] == "src" for r in t["rows"]}
        for t in tables:
            if t["header"][0] != "clustered run":
                continue
            for row in t["rows"]:
                paths = [REPO / f.strip("`") for f in sources[row["src"]]["results file(s)"].split("<br>")]
                seed = re.search(r", seed (\d+)$", row["clustered run"])  # a cell with several seeds: one row each
                (data,) = [d for d in map(json.loads, (p.read_text() for p in paths))
                           if seed is None or d.get("seed", 0) == int(seed.group(1))]
                if "cluster_losses" in data["last_round"]:  # the hypothesis of lowest loss
                    losses = data["last_round"]["cluster_losses"]
                    picks = [row_losses.index(min(row_losses)) for row_losses in losses]
                else:  # FedEM: the component of largest mixture weight
                    losses = data["last_round"]["pi"]
                    picks = [weights.index(max(weights)) for weights in losses]
                k = len(losses[0])
                members = [[c for c, h in zip(data["last_round"]["client_ids"], picks) if h == j] for j in range(k)]
                assert row["hypotheses"] == str(k) and row["after round"] == str(data["rounds_completed"])
                assert row["clients per hypothesis"] == ", ".join(str(len(m)) for m in members), name
                partition = data.get("run", {}).get("partition", {})
                if (partition.get("name") in ("fedpac", "client_sizes") and not partition.get("groups")
                        and data["dataset"] == "fashion_mnist"):  # group: id mod 5
                    assert row["label groups per hypothesis"] == ", ".join(
                        "{" + ", ".join(str(g) for g in sorted({c % 5 for c in m})) + "}" for m in members), name
                else:
                    assert row["label groups per hypothesis"] == DASH, name
                shown = row["accuracy per hypothesis"].split(", ")
                for m, value in zip(members, shown):
                    if not m:
                        assert value == DASH
                        continue
                    assert float(value) == pytest.approx(100 * statistics.mean(data["final_per_client"][c] for c in m),
                                                         abs=0.006), name


def test_hypotheses_in_use_names_a_lost_cluster(tmp_path):
    """A clustered run whose clients all pick two of three hypotheses shows the third as serving none, whether
    its cell is far from the paper or within the tolerance; a section not counted has no table."""
    gen = _generator()
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rounds_completed": 200, "final_per_client": [0.9, 0.8, 0.7, 0.6],
                                "last_round": {"client_ids": [0, 1, 2, 3],
                                               "cluster_losses": [[0.1, 0.5, 0.9], [0.2, 0.5, 0.1],
                                                                  [0.3, 0.5, 0.2], [0.1, 0.4, 0.5]]}}))
    section = gen.Section("demo", (), paper_rounds=200)
    cell = gen.Cell(gen.Row("HypCluster (k=3)", (), "", ("p", "t", "s", "m", "acc")), "s1", [path], "", "",
                    rounds=[200], planned=[200])
    cell.paper, cell.values = 90.0, [75.0]
    assert cell.gap == pytest.approx(-15.0)
    assert gen.cluster_use_rows([cell], section) == [["HypCluster (k=3)", "s1", "200", "3", "2, 0, 2", DASH, "75.00, —, 75.00"]]
    cell.values = [89.0]  # within 1.5 points: the lost cluster is still shown
    assert gen.cluster_use_rows([cell], section) == [["HypCluster (k=3)", "s1", "200", "3", "2, 0, 2", DASH, "75.00, —, 75.00"]]
    assert gen.cluster_use_rows([cell], gen.Section("demo", (), paper_rounds=200, counted=False)) == []


def test_hypotheses_in_use_names_the_label_groups_of_fedpacs_partition(tmp_path):
    """In FedPAC's partition client i is in label group i mod 5: a hypothesis serving clients 0, 3, 5 and 8
    serves groups {0, 3}, in FedPAC's partition and in Table 6's sized one; a partition with its own groups,
    or another rule (Dirichlet), gets a dash."""
    gen = _generator()
    path = tmp_path / "results.json"
    losses = [[0.1, 0.9] if i in (0, 3, 5, 8) else [0.9, 0.1] for i in range(10)]
    run = {"partition": {"name": "fedpac", "clients": 10}}
    path.write_text(json.dumps({"dataset": "fashion_mnist", "run": run, "rounds_completed": 200,
                                "final_per_client": [0.8] * 10,
                                "last_round": {"client_ids": list(range(10)), "cluster_losses": losses}}))
    cell = gen.Cell(gen.Row("HypCluster (k=2)", (), "", ("p", "t", "s", "m", "acc")), "s1", [path], "", "",
                    rounds=[200], planned=[200])
    cell.paper, cell.values = 90.0, [80.0]
    section = gen.Section("demo", (), paper_rounds=200)
    assert gen.cluster_use_rows([cell], section)[0][5] == "{0, 3}, {1, 2, 4}"
    from pflax.data import dominant_groups  # the generator's group count is the partition's

    assert gen.FEDPAC_TEN_CLASS_GROUPS == len(dominant_groups(10))
    run["partition"]["groups"] = [[0, 1], [2, 3]]
    path.write_text(json.dumps({**json.loads(path.read_text()), "run": run}))
    assert gen.cluster_use_rows([cell], section)[0][5] == DASH
    from pflax.suites.fedpac import imbalanced_sizes  # Table 6's split: client i has group i mod 5's classes

    labels = np.repeat(np.arange(10), 1000)
    for i, idx in enumerate(imbalanced_sizes(labels, 10, (300, 600), 0.2, 10, seed=0)):
        top = set(np.argsort(-np.bincount(labels[idx], minlength=10))[:3].tolist())
        assert top == set(dominant_groups(10)[i % gen.FEDPAC_TEN_CLASS_GROUPS])
    run["partition"] = {"name": "client_sizes", "clients": 10, "sizes": [300, 600, 1200]}
    path.write_text(json.dumps({**json.loads(path.read_text()), "run": run}))
    assert gen.cluster_use_rows([cell], section)[0][5] == "{0, 3}, {1, 2, 4}"
    run["partition"] = {"name": "dirichlet", "clients": 10, "beta": 1.0}
    path.write_text(json.dumps({**json.loads(path.read_text()), "run": run}))
    assert gen.cluster_use_rows([cell], section)[0][5] == DASH


def test_hypotheses_in_use_has_a_row_per_seed(tmp_path):
    """A clustered cell with several seeds, far from the paper, lists each seed's run on its own row."""
    gen = _generator()
    paths = []
    for seed, losses in ((0, [[0.1, 0.9], [0.2, 0.1]]), (1, [[0.1, 0.9], [0.2, 0.3]])):
        path = tmp_path / f"seed{seed}" / "results.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"seed": seed, "rounds_completed": 200, "final_per_client": [0.9, 0.7],
                                    "last_round": {"client_ids": [0, 1], "cluster_losses": losses}}))
        paths.append(path)
    cell = gen.Cell(gen.Row("HypCluster (k=2)", (), "", ("p", "t", "s", "m", "acc")), "s1", paths, "", "",
                    rounds=[200, 200], planned=[200])
    cell.paper, cell.values = 90.0, [80.0, 80.0]
    assert gen.cluster_use_rows([cell], gen.Section("demo", (), paper_rounds=200)) == [
        ["HypCluster (k=2), seed 0", "s1", "200", "2", "1, 1", DASH, "90.00, 70.00"],
        ["HypCluster (k=2), seed 1", "s1", "200", "2", "2, 0", DASH, "80.00, —"]]


def test_fedem_mixture_weights_fill_the_hypotheses_table(tmp_path):
    """A FedEM run far from the paper is listed with each client at its component of largest weight."""
    gen = _generator()
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rounds_completed": 200, "final_per_client": [0.9, 0.8, 0.7],
                                "last_round": {"client_ids": [0, 1, 2],
                                               "pi": [[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1]]}}))
    cell = gen.Cell(gen.Row("FedEM (M=3)", (), "", ("p", "t", "s", "m", "acc")), "s1", [path], "", "",
                    rounds=[200], planned=[200])
    cell.paper, cell.values = 80.0, [82.0]
    assert gen.cluster_use_rows([cell], gen.Section("demo", (), paper_rounds=200)) == [
        ["FedEM (M=3)", "s1", "200", "3", "2, 1, 0", DASH, "80.00, 80.00, —"]]


# ---------------------------------------------------------------------------------------------
# (e) every counted cell far from the paper is diagnosed on its page
# ---------------------------------------------------------------------------------------------

def test_every_far_cell_is_diagnosed():
    """The scoreboard's list of cells more than 1.5 points from the paper holds every such cell of the pages,
    each with where its page diagnoses it; with none, it says so in place of the table."""
    readme = (DOCS / "README.md").read_text()
    tables = [t for t in parse_tables(readme) if t["header"][-1] == "diagnosed by"]
    if _generator().NO_FAR_CELLS in _section_of(readme, "Cells more than 1.5 points from the paper"):
        assert not tables
        far_rows = []
    else:
        (far,) = tables
        far_rows = far["rows"]
    listed = {(row["page"].split("]")[0].lstrip("["), row["cell"], row["gap"]) for row in far_rows}
    on_pages = set()
    for name in PAGES:
        for t in parse_tables((DOCS / name).read_text()):
            if t["header"][:4] != ["method", "ours", "paper", "gap"]:
                continue
            for row in t["rows"]:
                if row["counted"] == "yes" and abs(float(row["gap"])) > 1.5:
                    on_pages.add((name, row["method"], row["gap"]))
    assert listed == on_pages
    undiagnosed = [row for row in far_rows if row["diagnosed by"] == "**not diagnosed**"]
    assert not undiagnosed, f"far cells without a diagnosis on their page: {undiagnosed}"


def test_table6_fedem_note_compares_the_papers_two_tables(monkeypatch):
    """Table 6's FedEM note, written only when the cell is far, sets the paper's Table 6 FedEM against its own
    Table 4 FedEM (M=3) and FedEM-FT (M=3), and gives the range over which the paper's other Table 6 methods
    move from their Table 1/4 cells, each recomputed here from paper_numbers.csv."""
    gen = _generator()
    paper = paper_csv()
    t6, t20 = "FMNIST/size_imbalanced_20clients", "FMNIST/20clients_frac1.0"
    here = paper[("FedPAC", "6", t6, "FedEM", "acc")]
    ours = {"table6_fmnist/fedem": here - 2.0, "table1_fmnist/fedem__m_3": here - 2.1,
            "table6_fmnist/local_only": 85.0, "table1_fmnist/local_only": 84.5}
    monkeypatch.setattr(gen, "_mean_final", ours.get)
    monkeypatch.setattr(gen, "_cell_number", lambda source: ours.get(source, 90.0 if "fedem__finetune" in source else None))
    monkeypatch.setattr(gen, "_not_truncated", lambda cell, value: "")
    note = gen._fedem_t6_note()
    assert note.startswith("**FedEM** ends 2.00 points under the paper")
    move = here - paper[("FedPAC", "4", t20, "FedEM (M=3)", "acc")]
    assert f"the paper's {here:.2f} ({move:+.2f})" in note
    others = [paper[("FedPAC", "6", t6, m, "acc")] - paper[("FedPAC", t, t20, m20, "acc")]
              for m, t, m20 in (("Local-only", "1", "Local-only"), ("FedAvg-FT", "1", "FedAvg-FT"),
                                ("FedRep", "1", "FedRep"), ("Ditto", "1", "Ditto"), ("Fed-RoD", "1", "Fed-RoD"),
                                ("pFedHN", "1", "pFedHN"), ("HypCluster", "4", "HypCluster (k=3)"),
                                ("FedPAC", "1", "FedPAC"))]
    assert f"move between {min(others):+.2f} and {max(others):+.2f} points" in note
    assert "(ours, over the 1 whose runs in both have finished, between +0.50 and +0.50)" in note
    ft = paper[("FedPAC", "4", t20, "FedEM-FT (M=3)", "acc")]
    assert f"FedEM-FT (M=3) is {ft:.2f}, {here - ft:+.2f} from this cell" in note
    assert note.endswith(f": 90.00, {90.0 - here:+.2f} from the paper's number here.")
    ours["table6_fmnist/fedem"] = here - 1.4  # within the tolerance: no note
    assert gen._fedem_t6_note() == ""


@pytest.mark.parametrize("clients, components, ft_folder", [(100, 3, ""), (100, 5, "seed0/"), (20, 3, ""),
                                                          (20, 5, "")])
def test_table4_fedem_note_reads_its_run_and_the_papers_column(monkeypatch, tmp_path, clients, components,
                                                               ft_folder):
    """Table 4's FedEM notes (100 clients, M=3 and M=5; 20 clients, M=5), written only when the cell is far: its
    curve's last 50 rounds, the smallest top mixture weight of its last round's clients, the other column's gap,
    the gaps beside our HypCluster with as many clusters and FedAvg of the column against the paper's, and
    FedEM-FT read from the same run (one file, or one per seed), each recomputed here."""
    gen = _generator()
    paper = paper_csv()
    columns = {100: ("FMNIST/100clients_frac0.3", "table1_fmnist_100clients"),
               20: ("FMNIST/20clients_frac1.0", "table1_fmnist")}
    other = 20 if clients == 100 else 100
    (setting, folder), (other_setting, other_folder) = columns[clients], columns[other]
    fedem, hypcluster = f"FedEM (M={components})", f"HypCluster (k={components})"
    here = paper[("FedPAC", "4", setting, fedem, "acc")]
    history = [{"round": r, "accuracy": [a / 100] * 4} for r, a in ((150, here + 1.5), (200, here + 2.0))]
    pad = [0.0] * (components - 3)
    run = {"status": "finished", "final_accuracy": {"mean": here + 2.0}, "personalized_history": history,
           "last_round": {"pi": [[0.2, 0.8, 0.0] + pad, [0.95, 0.03, 0.02] + pad, [0.0, 0.0, 1.0] + pad]}}
    finals = {f"{other_folder}/fedem__m_{components}": paper[("FedPAC", "4", other_setting, fedem, "acc")] + 2.6,
              f"{folder}/hypcluster__k_{components}": here + 1.0,
              f"{folder}/fedavg": here - 1.0}
    monkeypatch.setattr(gen, "_finished_runs",
                        lambda cell: [run] if cell == f"{folder}/fedem__m_{components}" else [])
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    assert gen._fedem_t4_note(8 - components, clients) == ""  # the other cell has no finished run
    assert gen._fedem_t4_note(components, other) == ""  # nor the other column's
    note = gen._fedem_t4_note(components, clients)
    assert note.startswith(f"**{fedem}** ends 2.00 points above the paper after the full 200 rounds (+2.60 in "
                           f"the {other}-client section)")
    assert "moves +0.50 points from round 150 to 200" in note
    assert ("2 of the 3 clients that trained put at least 0.9 of their mixture weight on one component and the "
            "others at least 0.80") in note
    hyp = paper[("FedPAC", "4", setting, hypcluster, "acc")]
    assert (f"it ends +1.00 from our {hypcluster} here and {here + 2.0 - hyp:+.2f} from the paper's (the paper's "
            f"{hypcluster} is {hyp - here:+.2f}") in note
    fedavg = paper[("FedPAC", "1", setting, "FedAvg", "acc")]
    assert f"The paper's FedEM is {here - fedavg:+.2f} from its FedAvg in this column, ours +3.00" in note
    # the page's first FedEM note (20 clients, M=3) gives the reading; the others point back to it
    assert ("(a mixture of near-global models, which lands near FedAvg), ours as a clustered one."
            in note) == ((clients, components) == (20, 3))
    assert "FedEM-FT" not in note
    ft = tmp_path / f"{folder}/fedem_ft__m_{components}/{ft_folder}from_fedem__m_{components}.json"
    ft.parent.mkdir(parents=True)
    ft.write_text(json.dumps({"personalized_history": [{"round": 200, "accuracy": [0.9, 0.92]}]}))
    ft_paper = paper[("FedPAC", "4", setting, f"FedEM-FT (M={components})", "acc")]
    assert gen._fedem_t4_note(components, clients).endswith(f"is {91.0 - ft_paper:+.2f} from the paper.")
    finals.clear()  # the other runs not finished: their clauses are left out
    assert gen._fedem_t4_note(components, clients).startswith(f"**{fedem}** ends 2.00 points above the paper "
                                                              "after the full 200 rounds. Its curve")
    assert "HypCluster" not in gen._fedem_t4_note(components, clients)
    assert "FedAvg" not in gen._fedem_t4_note(components, clients)
    run["last_round"]["pi"] = [[0.92, 0.08, 0.0] + pad, [0.0, 1.0, 0.0] + pad]  # every client on one component
    assert ("In the last round every one of the 2 clients that trained put at least 0.92 of its mixture weight on "
            "one component (`last_round.pi`") in gen._fedem_t4_note(components, clients)
    assert "so it acts as a clustered model" in gen._fedem_t4_note(components, clients)
    run["final_accuracy"]["mean"] = here + 1.4  # within the tolerance: no note
    assert gen._fedem_t4_note(components, clients) == ""


@pytest.mark.parametrize("clients", [20, 100])
def test_table4_fedem_ft_note_splits_the_fine_tunings_change_by_component(monkeypatch, tmp_path, clients):
    """Table 4's FedEM-FT note, written only when the cell is far: the change the fine-tuning makes to each
    client of the FedEM run it scores (the same seed), over all of them and per component of largest mixture
    weight with its clients' label groups, the column's other FedEM-FT run beside it, and the paper's
    FedEM-FT over its FedEM, each recomputed here; clients without recorded mixture weights are left out."""
    gen = _generator()
    paper = paper_csv()
    setting, folder = {100: ("FMNIST/100clients_frac0.3", "table1_fmnist_100clients"),
                       20: ("FMNIST/20clients_frac1.0", "table1_fmnist")}[clients]
    ft_paper = paper[("FedPAC", "4", setting, "FedEM-FT (M=5)", "acc")]
    fedem_paper = paper[("FedPAC", "4", setting, "FedEM (M=5)", "acc")]
    monkeypatch.setattr(gen, "RESULTS", tmp_path)

    def write(components, final, tuned, pi, ids, seed_folder=""):
        base = tmp_path / folder / f"fedem__m_{components}" / seed_folder
        base.mkdir(parents=True)
        (base / "results.json").write_text(json.dumps({
            "status": "finished", "seed": 0, "final_per_client": final,
            "last_round": {"pi": pi, "client_ids": ids}}))
        ft = tmp_path / folder / f"fedem_ft__m_{components}" / seed_folder / f"from_fedem__m_{components}.json"
        ft.parent.mkdir(parents=True)
        ft.write_text(json.dumps({"seed": 0, "personalized_history": [{"round": 200, "accuracy": tuned}]}))

    one_hot = [[1.0 if m == c else 0.0 for m in range(5)] for c in range(5)]
    # clients 0..4 (label groups 0..4) each on their own component; client 5 trained in no recorded round
    mean = (ft_paper - 2.0) / 100
    final = [mean + 0.01, mean + 0.01, mean + 0.01, mean + 0.01, mean + 0.02, mean]
    tuned = [mean, mean, mean, mean, mean, mean]
    assert gen._fedem_ft_note(5, clients) == ""  # no run yet
    write(5, final, tuned, one_hot, [0, 1, 2, 3, 4], "seed0" if clients == 100 else "")
    note = gen._fedem_ft_note(5, clients)
    assert note.startswith("**FedEM-FT (M=5)** ends 2.00 points under the paper.")
    assert "seed-0 clients by -1.20 points on average (0 of the 5 that trained in the last round go up, 5 down)" in note
    assert f"the paper's FedEM-FT (M=5) is {ft_paper - fedem_paper:+.2f} from its FedEM (M=5)" in note
    assert ("1 client of label group {0}, -1.00; 1 client of label group {1}, -1.00; 1 client of label group {2}, "
            "-1.00; 1 client of label group {3}, -1.00; 1 client of label group {4}, -2.00.") in note
    assert "Over these" not in note  # no component serves several label groups
    # the M=3 run: clients 0, 1, 2 on one component (label groups 0, 1, 2), 3 and 4 alone
    three = [[1.0, 0.0, 0.0]] * 3 + [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    write(3, [0.8] * 6, [0.82, 0.83, 0.84, 0.79, 0.8, 0.5], three, [0, 1, 2, 3, 4])
    note = gen._fedem_ft_note(5, clients)
    assert ("In the FedEM (M=3) run it scores for FedEM-FT (M=3): 3 clients of label groups {0, 1, 2}, +3.00; "
            "1 client of label group {3}, -1.00; 1 client of label group {4}, +0.00.") in note
    assert ("fine-tuning moves a component that serves one label group by -2.00 to +0.00 points and one that "
            "serves several by +3.00: it gains") in note
    assert "as every component has here." in note
    ft = next((tmp_path / folder / "fedem_ft__m_5").glob("**/from_fedem__m_5.json"))
    ft.write_text(json.dumps({"seed": 0, "personalized_history": [{"round": 200, "accuracy": [ft_paper / 100 - 0.014] * 6}]}))
    assert gen._fedem_ft_note(5, clients) == ""  # 1.40 under the paper: within the tolerance, no note


def _finished(curve: dict[int, float], mean: float) -> dict:
    """A finished run's results file with one client, its curve (round -> %) and its final mean."""
    return {"status": "finished", "final_accuracy": {"mean": mean},
            "personalized_history": [{"round": r, "accuracy": [a / 100]} for r, a in sorted(curve.items())]}


def test_table1_apfl_note_reads_its_curve_and_the_other_reading_of_alpha(monkeypatch):
    """Table 1's 20-client APFL note, written only when the cell is far: the gap, the curve's last 50 rounds
    and best evaluation after round 100, and the gaps of the alpha = 0.75 run and of the official code's
    mixture of outputs, nearer or further, recomputed here."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "1", "FMNIST/20clients_frac1.0", "APFL", "acc")]
    run = _finished({100: here - 3.0, 150: here - 2.5, 180: here - 1.5, 200: here - 2.0}, here - 2.0)
    finals = {"table1_fmnist/apfl": here - 2.0}
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: [run] if cell == "table1_fmnist/apfl" else [])
    note = gen._apfl_t1_note()
    assert note.startswith("**APFL** ends 2.00 points under the paper after the full 200 rounds. It is not a "
                           "truncated run")
    assert "moves +0.50 points from round 150 to 200" in note
    assert f"its best evaluation after round 100, {here - 1.5:.2f} at round 180, is still 1.50 under" in note
    assert "alpha = 0.75, and it has not finished yet." in note
    finals["table1_apfl_check/apfl__alpha_0_75"] = here - 3.0
    assert (f"alpha = 0.75, and it ends at {here - 3.0:.2f}, -3.00 from the paper, further from it, so the "
            "reading of alpha is not the gap.") in gen._apfl_t1_note()
    finals["table1_apfl_check/apfl__alpha_0_75"] = here - 1.0
    assert "nearer to it and within the tolerance, so the reading of alpha accounts for part of the gap." in \
        gen._apfl_t1_note()
    outputs = ("the diagnosis section \"APFL: mixing outputs, as the official code does\" below runs that mixture, "
               "and it ")
    assert outputs + "has not finished yet." in gen._apfl_t1_note()
    finals["table1_apfl_check/apfl__mixing_outputs"] = here - 0.5
    assert (outputs + f"ends at {here - 0.5:.2f}, -0.50 from the paper, nearer to it and within the tolerance, "
            "so the mixture accounts for part of the gap.") in gen._apfl_t1_note()
    finals["table1_apfl_check/apfl__mixing_outputs"] = here - 1.75
    assert (outputs + f"ends at {here - 1.75:.2f}, -1.75 from the paper, nearer to it, so the mixture accounts "
            "for part of the gap.") in gen._apfl_t1_note()
    finals["table1_apfl_check/apfl__mixing_outputs"] = here - 2.5
    assert outputs + f"ends at {here - 2.5:.2f}, -2.50 from the paper, further from it, so the mixture is not " \
        "the gap." in gen._apfl_t1_note()
    finals["table1_fmnist/apfl"] = here - 1.5  # within the tolerance: no note
    assert gen._apfl_t1_note() == ""


def test_table10_fedbabu_note_reads_its_swing_and_the_other_fine_tunings(monkeypatch):
    """Table 10's FedBABU note, written only when the cell is far: the gap, the curve, the largest move
    between evaluations from round 100 on, and the diagnosis section's fine-tunings, none or some within the
    tolerance, with the closest named, recomputed here."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "10", "FMNIST/feature_skew_rotation_20clients", "FedBABU", "acc")]
    curve = {90: here - 9.0, 100: here - 3.0, 150: here - 1.8, 160: here - 3.0, 200: here - 2.5}
    run = _finished(curve, here - 2.5)
    monkeypatch.setattr(gen, "_mean_final", {"table10_fmnist/fedbabu": here - 2.5}.get)
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: [run] if cell == "table10_fmnist/fedbabu" else [])
    tuned = {}
    monkeypatch.setattr(gen, "_cell_number", lambda source: tuned.get(source.split("/")[1]))
    note = gen._fedbabu_t10_note()
    assert note.startswith("**FedBABU** ends 2.50 points under the paper after the full 200 rounds.")
    assert "moves -0.70 points from round 150 to 200" in note
    assert "swings by up to 1.20 points between evaluations" in note  # 150 -> 160; 90 -> 100 is before round 100
    assert note.endswith("FedPAC does not say how its FedBABU fine-tunes.")  # no fine-tuning run yet
    tuned.update(fedbabu__finetune_head=here - 4.0, fedbabu__finetune_1_epoch=here - 3.0,
                 fedbabu__finetune_10_epochs=here - 2.0)
    assert ("and none comes within 1.5 points of the paper (the closest, whole model, 10 epochs: "
            f"{here - 2.0:.2f}), so the fine-tuning choice is not the gap.") in gen._fedbabu_t10_note()
    tuned["fedbabu__finetune_1_epoch"] = here - 0.5
    assert ("and whole model, 1 epoch comes within 1.5 points of the paper (the closest, whole model, 1 epoch: "
            f"{here - 0.5:.2f}).") in gen._fedbabu_t10_note()
    monkeypatch.setattr(gen, "_mean_final", {"table10_fmnist/fedbabu": here - 1.5}.get)
    assert gen._fedbabu_t10_note() == ""  # within the tolerance: no note


def test_fedcollab_table1_note_reads_the_seeds_and_the_papers_ipr_and_rsd(monkeypatch):
    """FedCollab Table 1's note, written for the far Acc cells only: Finetune's spread over seeds against the
    paper's standard deviation, and pFedMe's small clients (10-19), implied by the paper's mean and our large
    clients, against ours and Ditto's, and the mean over the other pFedMe settings, each recomputed here from
    the runs and paper_numbers.csv."""
    gen = _generator()
    paper = paper_csv()

    def of(method, metric):
        return paper[("FedCollab", "1", "LabelShift_FMNIST", method, metric)]

    def seed(k, large, small):
        return {"status": "finished", "seed": k, "final_per_client": [large / 100] * 10 + [small / 100] * 10,
                "final_accuracy": {"mean": (large + small) / 2}}

    ft = of("Finetune", "Acc_mean")
    runs = {"finetune": [seed(0, 90, 2 * ft - 90 - 16), seed(1, 90, 2 * ft - 90 - 4), seed(2, 90, 2 * ft - 90 - 4)],
            "perfedavg": [seed(0, 90, 2 * of("Per-FedAvg", "Acc_mean") - 90 - 2)],
            "pfedme": [seed(0, 94, 40.0), seed(1, 92, 50.0)],
            "ditto": [seed(0, 94, 44.0), seed(1, 94, 46.0)]}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: runs.get(cell.split("/")[1], []))
    finals = {}
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    note = gen._collab_t1_note()
    assert note.startswith("Cells more than 1.5 points from the paper, diagnosed.")
    # Finetune's seeds are 8, 2 and 2 points under the paper: mean -4, population std 2.83
    assert (f"The paper's standard deviation over its 5 seeds is {of('Finetune', 'Acc_std'):.2f} (its "
            f"Per-FedAvg's {of('Per-FedAvg', 'Acc_std'):.2f}); ours over 3 seeds is 2.83, seed 0 6.00 points under "
            "the mean of the others. The gap, 4.00 points, is more than one such standard deviation.") in note
    assert "(Per-FedAvg, whose small clients adapt the same way, is -1.00 from the paper over 1 seeds.)" in note
    implied = 2 * of("pFedMe", "Acc_mean") - 93.0
    assert (f"With its mean of {of('pFedMe', 'Acc_mean'):.2f} and large clients at ours (93.0 %), the paper's "
            f"small clients would average {implied:.1f} %. Ours average 40.0 to 50.0 % over the 2 seeds, as "
            "Ditto's average 44.0 to 46.0 %") in note
    assert f"IPR ({of('pFedMe', 'IPR_mean'):.0f}) and RSD ({of('pFedMe', 'RSD_mean'):.2f}," in note
    assert "Over them" not in note  # no other pFedMe setting has finished
    finals.update({"fedcollab_table1_fmnist/fedavg": 46.0, "fedcollab_table1_fmnist/pfedme": 69.0,
                   "fedcollab_table1_pfedme_check/pfedme__personal_lr_0_01": 45.0})
    assert (f"Over them the mean moves from 45.00 to 69.00 (FedAvg: 46.00), with the small clients' accuracy; the "
            f"paper's {of('pFedMe', 'Acc_mean'):.2f} lies within that range.") in gen._collab_t1_note()
    runs["pfedme"] = [seed(0, 90, 2 * of("pFedMe", "Acc_mean") - 90)]  # on the paper's number: no pFedMe part
    runs["finetune"] = [seed(0, 90, 2 * ft - 90 - 4), seed(1, 90, 2 * ft - 90 - 4)]  # -2.00, std 0
    note = gen._collab_t1_note()
    assert "**pFedMe**" not in note and "The gap, 2.00 points, is more than one such standard deviation." in note
    runs["finetune"] = [seed(0, 90, 2 * ft - 90 - 2), seed(1, 90, 2 * ft - 90 + 2)]  # -1 and +1: no note
    assert gen._collab_t1_note() == ""


def _pick_seed(folder, arm, k, mnist_curve, inverse):
    """A FedPick benchmark file of one seed: its MNIST curve at rounds 5..30 and its best on `inverse`."""
    curve = [[a, 50.0, inverse, 50.0, 50.0] for a in mnist_curve]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{arm}_seed{k}.json").write_text(json.dumps({
        "arm": arm, "seed": k, "eval_rounds": [5, 10, 15, 20, 25, 30], "accuracy_curve": curve,
        "best_per_domain": [max(mnist_curve), 50.0, inverse, 50.0, 50.0]}))


def test_fedpick_table2_notes_read_the_thirty_round_runs(monkeypatch, tmp_path):
    """FedPick Table II's two MNIST notes: the far cells and their number, FedAvg's and FedProx's last five
    rounds, the inverted domain beside FedBN's, FedBN's gain over FedAvg against the paper's; FedRep's flat
    curve and spread against FedBN's, FedPer's climb beside FedAvg's, and the BatchNorm-local runs, each
    recomputed here from the files written."""
    gen = _generator()
    paper = paper_csv()

    def of(method):
        return paper[("FedPick", "II", "Digits5/MNIST", method, "best_acc_mean")]

    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    assert gen._fedpick_t2_mnist_note() == "" and gen._fedpick_bn_note() == ""  # no runs yet
    folder = tmp_path / "fedpick_domains"
    ramp = [-6.0, -3.0, -2.0, -1.0, -0.5, 0.0]  # each curve ends at its best

    def arm(name, end, inverse, seeds=(0.0, 0.0)):
        for k, shift in enumerate(seeds):
            _pick_seed(folder, name, k, [end + shift + r for r in ramp], inverse)

    arm("fedavg", of("FedAvg") - 2.0, 50.0)
    arm("fedprox", of("FedProx") - 3.0, 52.0)
    arm("fedper", of("FedPer") - 8.0, 38.0)
    arm("fedrep", of("FedRep") - 20.0, 40.0, seeds=(-3.0, 3.0))
    arm("fedbn", of("FedAvg") - 1.0, 84.0, seeds=(-0.1, 0.1))
    arm("fedper_local_bn", of("FedAvg") - 2.0, 92.0)
    arm("fedrep_local_bn", of("FedAvg") - 3.0, 90.0)
    note = gen._fedpick_t2_mnist_note()
    # FedBN is 1.0 from FedAvg's paper number; against its own paper number it may be far or not
    far = 4 + (abs(round(of("FedAvg") - 1.0 - of("FedBN"), 2)) > 1.5)
    assert note.startswith(f"{('Four', 'Five')[far - 4]} cells are more than 1.5 points from the paper")
    assert "**FedAvg** and **FedProx** (2.0 and 3.0 under) have flattened (0.5 and 0.5 points over" in note
    assert "where they reach about 51 % and FedBN 84 %" in note
    assert (f"is 1.0 points above FedAvg here against {of('FedBN') - of('FedAvg'):.1f} in the paper.") in note
    note = gen._fedpick_bn_note()
    assert note.startswith("FedPer and FedRep are the two MNIST cells furthest from the paper (8.0 and 20.0 "
                           "points under).")
    low, high = of("FedRep") - 20.0 - 6.0, of("FedRep") - 20.0
    assert f"stays between {low:.1f} and {high:.1f} % from round 5 on, with a spread over seeds 30 times" in note
    assert "FedPer's climbs 3.0 points from round 10 to 30, as FedAvg's climbs 3.0, far from its 8.0-point" in note
    assert (f"reach {of('FedAvg') - 2.0:.1f} and {of('FedAvg') - 3.0:.1f} % on MNIST (FedAvg: "
            f"{of('FedAvg') - 2.0:.1f}), and on the inverted domain they rise from 38.0 and 40.0 % to 92.0 and "
            "90.0 %") in note
    for name in ("fedavg", "fedprox", "fedper", "fedrep", "fedbn"):  # every cell within the tolerance
        for k in (0, 1):
            (folder / f"{name}_seed{k}.json").unlink()
        arm(name, of(gen._ARM_LABELS[name]), 50.0)
    assert gen._fedpick_t2_mnist_note() == ""



def test_the_batchnorm_diagnosis_at_300_rounds_has_the_30_round_rules_and_reads_its_runs(monkeypatch, tmp_path):
    """The BatchNorm diagnosis of FedPer and FedRep at the paper's 300 rounds: its run files differ from the
    30-round diagnosis's only in length, checkpointing and results folder; the section is a diagnosis showing
    the counted 300-round cells beside the BatchNorm-local runs; its note states a rule's 300-round gap both
    ways only once every seed of that rule's BatchNorm-local run has a file."""
    gen = _generator()
    folder = REPO / "benchmarks" / "paper" / "fedpick"
    for arm in ("fedper_local_bn", "fedrep_local_bn"):
        short = tomllib.loads((folder / "fedpick_table2_local_bn_check" / f"{arm}.toml").read_text())
        long = tomllib.loads((folder / gen.BN_CHECK_300 / f"{arm}.toml").read_text())
        assert (long["rounds"], long["out"]) == (300, f"benchmarks/results/{gen.DIGITS_300}")
        assert long["checkpoint_every"] > 0
        for key in ("rounds", "out", "checkpoint_every"):
            del short[key], long[key]
        assert long == short
    (section,) = gen._fedpick_bn_check_300()
    assert section.diagnosis and not section.counted and section.paper_rounds == 300
    assert [row.method for row in section.rows] == [
        "FedPer, encoder BN averaged (the 300-round cell above)", "FedPer, encoder BN local",
        "FedRep, encoder BN averaged (the 300-round cell above)", "FedRep, encoder BN local"]
    assert [row.files for row in section.rows] == [(f"{gen.DIGITS_300}/{arm}_seed*.json",) for arm in
                                                   ("fedper", "fedper_local_bn", "fedrep", "fedrep_local_bn")]

    paper = paper_csv()
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    results = tmp_path / gen.DIGITS_300
    ends = {"fedper": -6.0, "fedrep": -24.0, "fedper_local_bn": -1.0, "fedrep_local_bn": -1.25}
    for arm, gap in ends.items():
        method = "FedPer" if arm.startswith("fedper") else "FedRep"
        top = paper[("FedPick", "II", "Digits5/MNIST", method, "best_acc_mean")] + gap
        for k in (0, 1, 2)[: 2 if arm == "fedrep_local_bn" else 3]:  # FedRep, BN local: seed 2 still to run
            _pick_seed(results, arm, k, [top - 1.0, top + 0.5 * (k - 1)], 50.0)
    note = gen._fedpick_bn_check_300_note()
    assert "run files `benchmarks/paper/fedpick/fedpick_table2_local_bn_check_300/`" in note
    assert note.endswith(" After 300 rounds, FedPer is -6.00 points from the paper with it averaged and -1.00 "
                         "with it local (3 seeds each).")  # FedRep's seed 2 is still to run
    assert gen._bn_local_300("fedrep") is None
    top = paper[("FedPick", "II", "Digits5/MNIST", "FedRep", "best_acc_mean")] - 1.25
    _pick_seed(results, "fedrep_local_bn", 2, [top - 1.0, top + 0.5], 50.0)
    assert gen._bn_local_300("fedrep") == pytest.approx(top)
    note = gen._fedpick_bn_check_300_note()
    assert note.endswith(" After 300 rounds, FedPer is -6.00 points from the paper with it averaged and -1.00 "
                         "with it local (3 seeds each); FedRep is -24.00 points from the paper with it averaged "
                         "and -1.25 with it local (3 seeds each).")
    for k in (0, 1, 2):
        (results / f"fedper_local_bn_seed{k}.json").unlink()
    assert gen._fedpick_bn_check_300_note().endswith(" After 300 rounds, FedRep is -24.00 points from the paper "
                                                     "with it averaged and -1.25 with it local (3 seeds each).")

def test_fedpick_table4_wo_lce_note_reads_its_first_thirty_rounds(monkeypatch, tmp_path):
    """FedPick Table IV's w/o L_lce note: its cell as a 30-round run would give it (best MNIST accuracy up to
    round 30, mean over the seeds), its gap then, its 5-round steps from round 15 to 30, and the largest gain of
    the 30-round arms over their last 10 rounds, each recomputed here from the files written."""
    gen = _generator()
    here = paper_csv()[("FedPick", "IV", "Digits5/MNIST", "w/o L_lce", "best_acc_mean")]
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    assert gen._wo_lce_note() == ""
    folder = tmp_path / "fedpick_domains"
    for k, shift in enumerate((-1.0, 1.0)):  # a 300-round run: evaluations every 5 rounds to 300
        curve = [[min(60.0 + 2.0 * i + shift, 97.0), 50.0, 50.0, 50.0, 50.0] for i in range(60)]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"wo_lce_seed{k}.json").write_text(json.dumps({
            "eval_rounds": list(range(5, 305, 5)), "accuracy_curve": curve, "best_per_domain": [97.0] * 5}))
    note = gen._wo_lce_note()
    assert "its MNIST accuracy was 70.00 (the best over" in note  # round 30 is the 6th evaluation: 60 + 10
    assert f"{here - 70.0:.2f} points under the paper" in note
    assert "still climbed 2.0, 2.0 and 2.0 points over the 5-round steps from round 15 to 30." in note
    _pick_seed(folder, "fedbn", 0, [90.0, 91.0, 92.0, 92.5, 93.0, 93.7], 80.0)
    _pick_seed(folder, "wo_ent", 0, [90.0, 91.0, 92.0, 92.0, 92.0, 92.1], 80.0)
    assert "every other ablation gained at most 1.2 points over their last 10." in gen._wo_lce_note()


def test_fedpick_usps_note_reads_the_usps_and_width1_runs(monkeypatch, tmp_path):
    """FedPick Table II's real-USPS note: every arm's USPS gap (range), SingleSet's on USPS and MNIST, the
    federated arms' climb from round 20 to 30, and the width-1 runs' gain over seed 0 at width 0.125 with what
    remains of the gap, each recomputed here from the files written; no note while an arm has no run."""
    gen = _generator()
    paper = paper_csv()

    def of(method, domain):
        return paper[("FedPick", "II", f"Digits5/{domain}", method, "best_acc_mean")]

    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    assert gen._fedpick_usps_note() == ""

    def write(folder, arm, seed, mnist, usps, climb):
        # domains mnist, usps, mnistm, inverse, rotated; USPS climbs `climb` from round 20 to 30, peaking at 30
        steps = [usps - 10.0, usps - 6.0, usps - 4.0, usps - climb, usps - climb / 2, usps]
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / f"{arm}_seed{seed}.json").write_text(json.dumps({
            "seed": seed, "eval_rounds": [5, 10, 15, 20, 25, 30],
            "accuracy_curve": [[mnist, u, 50.0, 50.0, 50.0] for u in steps],
            "best_per_domain": [mnist, usps, 50.0, 50.0, 50.0]}))

    under = {"single": (4.0, 0.3, 0.1), "fedavg": (13.0, 4.0, 1.5), "lg_fedavg": (6.0, 0.5, 1.4),
             "fedbn": (7.0, 2.5, 1.7), "fedpick": (5.5, 1.0, 1.5)}  # USPS gap, MNIST gap, climb
    for label, arm in gen._USPS_ARMS:
        u, m, climb = under[arm]
        write("fedpick_domains_usps", arm, 0, of(label, "MNIST") - m, of(label, "USPS") - u, climb)
    note = gen._fedpick_usps_note()
    assert ("Every method (SingleSet, FedAvg, LG-FedAvg, FedBN, FedPick) is 4.0 to 13.0 points under the paper, "
            "more than on MNIST,") in note
    assert "loses 4.0 points here and 0.3 on MNIST" in note
    assert "from round 20 to 30 they gain 1.40 to 1.70 points" in note and "SingleSet 0.1." in note
    assert "width-1" not in note  # no width-1 run yet
    write("fedpick_domains_width1", "fedpick", 0, of("FedPick", "MNIST") - 1.5, of("FedPick", "USPS") - 4.0, 1.0)
    write("fedpick_domains_width1", "fedbn", 0, of("FedBN", "MNIST") - 2.0, of("FedBN", "USPS") - 4.5, 1.0)
    note = gen._fedpick_usps_note()
    assert ("gains 1.5 points on USPS for FedPick and 2.5 for FedBN over the same seed at width 0.125 after the "
            "same 30 rounds, and under a point on MNIST. The width is thus part of the USPS gap, not most of it. "
            "What remains, 4.00 to 4.50 points,") in note
    write("fedpick_domains_usps", "fedavg", 0, 50.0, of("FedAvg", "USPS") + 1.0, 1.0)  # one arm above the paper
    assert gen._fedpick_usps_note() == ""


def test_fedcollab_intro_gives_how_far_the_trainer_is_from_the_run_files(monkeypatch, tmp_path):
    """The FedCollab intro's clause: the largest distance between the trainer's committed Acc means and seed 0
    of the run files' cells of the same methods, recomputed here."""
    gen = _generator()
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    assert gen._collab_trainer_agreement() == "are not committed"
    (tmp_path / "fedcollab_fmnist").mkdir()
    (tmp_path / "fedcollab_fmnist" / "results.json").write_text(json.dumps({"methods": {
        "Local": {"Acc": 85.0}, "FedAvg": {"Acc": 47.0}, "FedAvg + FedCollab": {"Acc": 91.0}}}))
    assert gen._collab_trainer_agreement() == "have no run file's cell to compare with yet"
    for cell, mean in (("local", 85.25), ("fedavg", 46.5)):
        for seed, shift in ((0, 0.0), (1, 9.0)):  # seed 1 is not compared
            folder = tmp_path / "fedcollab_table1_fmnist" / cell / f"seed{seed}"
            folder.mkdir(parents=True)
            (folder / "results.json").write_text(json.dumps(
                {"status": "finished", "seed": seed, "final_accuracy": {"mean": mean + shift}}))
    assert gen._collab_trainer_agreement() == "are within 0.50 points of seed 0 of theirs on every mean (2 methods)"


def _pfedme_cell_and_check(monkeypatch, tmp_path, gap: float):
    """The generator with a finished 20-client pFedMe cell of one seed (0) ending ``gap`` points under the
    paper (``gap + 0.5`` under at round 150, ``gap + 1`` at 100), and the path where the inner-step check's results
    go (in ``tmp_path``, not written yet). Returns ``(generator, paper number, cell, check path)``."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "1", "FMNIST/20clients_frac1.0", "pFedMe", "acc")]
    cell = _finished({100: here - gap - 1.0, 150: here - gap - 0.5, 200: here - gap}, here - gap)
    cell["seed"] = 0
    monkeypatch.setattr(gen, "_finished_runs", lambda c: [cell] if c == "table1_fmnist/pfedme" else [])
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    check = tmp_path / gen.PFEDME_CHECK / "results.json"
    check.parent.mkdir(parents=True)
    return gen, here, cell, check


def test_table1_pfedme_note_reads_the_inner_step_check(monkeypatch, tmp_path):
    """Table 1's 20-client pFedMe note: the check run of the inner step against the cell's seed 0 at their
    last common evaluation, marked in progress until it has finished; once finished, whether it ends nearer
    to the paper or further from it, each recomputed here."""
    gen, here, cell, check = _pfedme_cell_and_check(monkeypatch, tmp_path, gap=2.0)
    monkeypatch.setattr(gen, "_gain_note", lambda *args: "")
    assert gen._pfedme_20_note().endswith("0.1 for our 0.01; it has no evaluation yet.")
    run = _finished({100: here - 4.0, 150: here - 3.5}, here - 3.5)
    run["status"] = "running"
    check.write_text(json.dumps(run))
    assert gen._pfedme_20_note().endswith(
        f"0.1 for our 0.01 (in progress, round 150 of 200): at round 150 it is at {here - 3.5:.2f}, against "
        f"{here - 2.5:.2f} for the cell's seed 0 at the same round.")
    run = _finished({100: here - 4.0, 150: here - 3.5, 200: here - 3.0}, here - 3.0)
    check.write_text(json.dumps(run))
    assert gen._pfedme_20_note().endswith(
        f"at round 200 it is at {here - 3.0:.2f}, against {here - 2.0:.2f} for the cell's seed 0 at the same "
        "round. It ends -3.00 from the paper, further from it than the cell's seed 0 (-2.00), so the inner step "
        "is not the gap.")
    run = _finished({100: here - 4.0, 150: here - 3.5, 200: here - 1.0}, here - 1.0)
    check.write_text(json.dumps(run))
    assert gen._pfedme_20_note().endswith("nearer to it than the cell's seed 0 (-2.00), so the inner step "
                                          "accounts for part of the gap.")
    cell["final_accuracy"]["mean"] = here - 1.4  # within the tolerance: no note
    assert gen._pfedme_20_note() == ""


def test_table1_pfedme_check_section_reports_its_run_whether_or_not_the_cell_is_far(monkeypatch, tmp_path):
    """The diagnosis section's note gives the check run against the cell's seed 0 even when the cell is within
    the tolerance (the cell's own note is then empty), with the same comparison as that note (the test above
    covers a check in progress)."""
    gen, here, cell, check = _pfedme_cell_and_check(monkeypatch, tmp_path, gap=1.4)
    static = "`python benchmarks/paper/run_table.py fedpac/table1_pfedme_check` runs the second row."
    assert gen._pfedme_check_note().endswith(static)  # no check run yet: nothing to compare
    check.write_text(json.dumps(_finished({150: here - 3.5, 200: here - 3.25}, here - 3.25)))
    assert gen._pfedme_check_note().endswith(
        f"{static} The second row: at round 200 it is at {here - 3.25:.2f}, against {here - 1.4:.2f} for the "
        "cell's seed 0 at the same round. It ends -3.25 from the paper, further from it than the cell's seed 0 "
        "(-1.40), so the inner step is not the gap.")
    assert gen._pfedme_20_note() == ""  # the cell is within the tolerance


def test_table3_pfedme_note_sets_its_move_from_table1_against_the_papers(monkeypatch):
    """Table 3's pFedMe note, written only when the cell is far: its curve's last 50 rounds, and how far it
    moves from Table 1's pFedMe, ours and the paper's, beside the range of the paper's other methods' moves
    (recomputed here from paper_numbers.csv) and of ours where both cells have finished."""
    gen = _generator()
    paper = paper_csv()
    t3, t1 = "FMNIST/concept_shift_20clients", "FMNIST/20clients_frac1.0"
    here = paper[("FedPAC", "3", t3, "pFedMe", "acc")]
    history = [{"round": r, "accuracy": [a / 100] * 2} for r, a in ((150, here - 2.5), (200, here - 2.0))]
    run = {"status": "finished", "final_accuracy": {"mean": here - 2.0}, "personalized_history": history}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: [run] if cell == "table3_fmnist/pfedme" else [])
    numbers = {"table1_fmnist/pfedme": here + 1.0, "table3_fmnist/ditto": 88.0, "table1_fmnist/ditto": 90.5,
               "table3_fmnist/local_only": 86.0, "table1_fmnist/local_only": 85.5}
    monkeypatch.setattr(gen, "_mean_final", numbers.get)
    monkeypatch.setattr(gen, "_cell_number", numbers.get)
    note = gen._pfedme_t3_note()
    assert note.startswith("**pFedMe** ends 2.00 points under the paper after the full 200 rounds; its curve")
    assert "moves +0.50 points from round 150 to 200" in note
    others = [paper[("FedPAC", "3", t3, m, "acc")] - paper[("FedPAC", "1", t1, m, "acc")]
              for m in ("Local-only", "FedAvg-FT", "FedRep", "Ditto", "FedBABU", "Fed-RoD", "FedPAC")]
    move = here - paper[("FedPAC", "1", t1, "pFedMe", "acc")]
    assert (f"From Table 1 to here ours moves -3.00 and the paper's {move:+.2f}; the paper's other 7 methods move "
            f"between {min(others):+.2f} and {max(others):+.2f}, ours (the 2 finished in both) between -2.50 and "
            "+0.50.") in note
    run["final_accuracy"]["mean"] = here - 1.5  # within the tolerance: no note
    assert gen._pfedme_t3_note() == ""


def test_table1_apfl_outputs_section_sets_the_two_curves_side_by_side(monkeypatch):
    """The diagnosis section of APFL's mixture of outputs: once both runs have finished, at how many common
    evaluations the official code's mixture is above the cell, its largest lead and the last round it
    leads, and how close the two stay afterwards, each recomputed here; before that, the setting alone."""
    gen = _generator()
    cell = _finished({10: 80.0, 20: 82.0, 30: 84.0, 40: 85.0}, 85.0)
    outputs = _finished({10: 80.5, 20: 83.5, 30: 83.75, 40: 85.25}, 85.25)
    runs = {"table1_fmnist/apfl": [cell], gen.APFL_OUTPUTS: []}
    monkeypatch.setattr(gen, "_finished_runs", lambda c: runs.get(c, []))
    setting = "fedpac/table1_apfl_check apfl__mixing_outputs`."
    assert gen._apfl_outputs_note().endswith(setting)  # not finished: nothing to compare
    runs[gen.APFL_OUTPUTS] = [outputs]
    assert gen._apfl_outputs_note().endswith(
        f"{setting} It is above the cell at 3 of the 4 evaluations (`rounds.csv` in both folders), by up to 1.50 "
        "points (round 20), the last time at round 40.")
    outputs["personalized_history"][-1]["accuracy"] = [0.849]
    assert gen._apfl_outputs_note().endswith(
        "by up to 1.50 points (round 20), the last time at round 20; from round 30 on the two stay within 0.25 "
        "points of each other, and the last round's gap is -0.10.")
    runs[gen.APFL_OUTPUTS] = [_finished({10: 79.0, 20: 81.0}, 81.0)]
    assert gen._apfl_outputs_note().endswith(f"{setting} It is under the cell at every evaluation (`rounds.csv` "
                                             "in both folders).")


def test_table1_100_client_apfl_note_quotes_the_20_client_gap_only_once_that_run_exists(monkeypatch):
    """The 100-client APFL note, written only when the cell is far: the 20-client cell's gap is quoted when
    that run has finished and left out, without failing, when it has not."""
    gen = _generator()
    paper = paper_csv()
    here = paper[("FedPAC", "1", "FMNIST/100clients_frac0.3", "APFL", "acc")]
    there = paper[("FedPAC", "1", "FMNIST/20clients_frac1.0", "APFL", "acc")]
    finals = {"table1_fmnist_100clients/apfl": here - 2.0, "table1_fmnist/apfl": there - 1.5}
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    monkeypatch.setattr(gen, "_not_truncated", lambda cell, value: "")
    note = gen._apfl_100_note()
    assert note.startswith("**APFL** ends 2.00 points under the paper after the full 200 rounds.")
    assert ("(alpha = 0.25 on the personal model, fixed, the parameters mixed), which is -1.50 from the paper "
            "there; that") in note
    assert ("its diagnosis sections \"APFL: which model alpha weighs\" and \"APFL: mixing outputs, as the official "
            "code does\" check the rule") in note
    del finals["table1_fmnist/apfl"]
    assert "(alpha = 0.25 on the personal model, fixed, the parameters mixed); that section's note" in \
        gen._apfl_100_note()
    finals["table1_fmnist_100clients/apfl"] = here - 1.5  # within the tolerance: no note
    assert gen._apfl_100_note() == ""


def test_table1_100_client_pfedme_note_reads_its_rule_and_the_inner_step_check(monkeypatch, tmp_path):
    """The 100-client pFedMe note, written only when the finished cell is far: its gap, its rule's lambda, K
    and inner step read from its results file, the 20-client cell's gap once that run exists, and the round
    where the 20-client run of pFedMe's own inner step diverged once that run says so."""
    gen = _generator()
    paper = paper_csv()
    here = paper[("FedPAC", "1", "FMNIST/100clients_frac0.3", "pFedMe", "acc")]
    there = paper[("FedPAC", "1", "FMNIST/20clients_frac1.0", "pFedMe", "acc")]
    run = {**_finished({150: here - 3.0, 200: here - 2.5}, here - 2.5),
           "config": {"prox_mu": 10.0, "inner_steps": 7, "personal_lr": 0.03}}
    runs = {"table1_fmnist_100clients/pfedme": [run]}
    monkeypatch.setattr(gen, "_finished_runs", lambda c: runs.get(c, []))
    finals = {"table1_fmnist/pfedme": there - 1.25}
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    monkeypatch.setattr(gen, "_not_truncated", lambda cell, value: "")
    monkeypatch.setattr(gen, "RESULTS", tmp_path)
    note = gen._pfedme_100_note()
    assert note.startswith("**pFedMe** ends 2.50 points under the paper after the full 200 rounds.")
    assert ("with lambda = 10, K = 7 and an inner step of 0.03, which is -1.25 from the paper there. FedPAC's "
            "appendix does not give the inner step;") in note
    assert "pFedMe's own code. Here a client's personal model" in note  # no check run: nothing said of it
    check = tmp_path / gen.PFEDME_CHECK / "results.json"
    check.parent.mkdir(parents=True)
    check.write_text(json.dumps({"diverged_at_round": 171}))
    del finals["table1_fmnist/pfedme"]
    note = gen._pfedme_100_note()
    assert "and an inner step of 0.03. FedPAC's" in note
    assert "pFedMe's own code, and that run diverged at round 171 of 200. Here" in note
    run["final_accuracy"]["mean"] = here - 1.5  # within the tolerance: no note
    assert gen._pfedme_100_note() == ""
    runs.clear()  # not finished: no note
    assert gen._pfedme_100_note() == ""


def test_a_far_cell_is_diagnosed_only_where_its_section_names_it(tmp_path):
    gen = _generator()
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"rounds_completed": 200}))
    cell = gen.Cell(gen.Row("FedAvg", (), "", ("p", "t", "s", "m", "acc")), "s1", [path], "", "",
                    rounds=[200], planned=[200])
    cell.paper, cell.values = 90.0, [85.0]
    silent = gen.Section("demo", (), paper_rounds=200, note="LG-FedAvg and FedAvg-FT have flattened.")
    named = gen.Section("demo", (), paper_rounds=200, note="**FedAvg** has flattened.")
    assert gen.far_and_diagnosed(silent, [cell]) == [(cell, "")]
    assert gen.far_and_diagnosed(named, [cell]) == [(cell, "the section's note")]


def test_readme_table_of_missing_seeds_matches_the_pages():
    """A counted cell whose run file lists seeds that have no results yet says so in its status, and the
    scoreboard lists exactly those cells, with the seeds its run file names, each once (not where a page
    repeats a cell counted on another)."""
    (seeds,) = [t for t in parse_tables((DOCS / "README.md").read_text()) if "seeds not run yet" in t["header"]]
    assert seeds["rows"][-1]["results page"] == "**all pages**"
    listed = {(re.fullmatch(r"\[(.+)\]\((.+)\)", r["results page"]).group(2), r["cell"]): r
              for r in seeds["rows"][:-1]}
    found = {}
    for name in PAGES:
        for t in parse_tables(_without_diagnosis_sections((DOCS / name).read_text())):
            if t["header"][0] != "method":
                continue
            for row in t["rows"]:
                if "repeated from" in row["status"]:
                    continue
                pending = re.findall(r"seed (\d+) in progress \(round (\d+)\)", row["status"])
                match = re.search(r"seeds? ([\d, ]+) of the run file's (\d+) not run yet", row["status"])
                if match or pending:
                    found[(name, row["method"])] = (match, pending, row)
    assert sorted(found) == sorted(listed)
    for key, (match, pending, row) in found.items():
        if pending:  # seeds running beside finished ones: the mean and the seeds column are the finished ones'
            assert listed[key]["seeds in progress"] == ", ".join(f"{k} (round {r})" for k, r in pending)
            assert listed[key]["seeds finished"].startswith(f"{row['seeds']} of ")
        missing = match.group(1).split(", ") if match else []
        assert listed[key]["seeds not run yet"] == (", ".join(missing) or DASH)
        finished, total = map(int, listed[key]["seeds finished"].split(" of "))
        running = [] if listed[key]["seeds in progress"] == DASH else listed[key]["seeds in progress"].split(", ")
        assert finished + len(running) + len(missing) == total
        if match:
            assert int(match.group(2)) == total


def test_one_seed_cells_near_the_tolerance_list_three_seeds_and_their_page_names_them():
    """The scoreboard's seed rule holds on every page: a counted cell with one finished seed whose gap lies
    within 0.25 points of the 1.5-point tolerance, on either side, has a run file listing at least three seeds
    (its status names the missing ones), and its page's introduction names it among the three-seed cells. A
    run in progress has no finished seed: its provisional gap decides nothing yet."""
    one_seed = []
    for name in PAGES:
        text = (DOCS / name).read_text()
        intro = text.split("\n## ")[0]
        for t in parse_tables(_without_diagnosis_sections(text)):
            if t["header"][:4] != ["method", "ours", "paper", "gap"]:
                continue
            for row in t["rows"]:
                if row["counted"] != "yes" or row["seeds"] != "1" or row["status"].startswith("in progress"):
                    continue
                one_seed.append((name, row["method"]))
                if abs(abs(float(row["gap"])) - 1.5) > 0.25:
                    continue
                listed = re.search(r"of the run file's (\d+)", row["status"])
                assert listed and int(listed.group(1)) >= 3, f"{name} {row['method']}: one seed near the tolerance"
                assert row["method"] in intro, f"{name}: the introduction does not name {row['method']}"
    assert len(one_seed) >= 10, "the pages' one-seed cells were not found: the test would check nothing"


def test_each_sections_best_baseline_by_the_papers_numbers_lists_three_seeds():
    """Issue #23 asks for three seeds for the best baseline of each table. In every counted section, the row
    with the highest paper accuracy among those that are not the paper's own method is found from
    ``paper_numbers.csv``, not named by hand, and its run file must list at least three seeds (a row repeated
    from another page is checked there)."""
    gen = _generator()
    paper = gen.paper_numbers()
    own = {"FedPAC": "FedPAC", "FedCollab": "FedCollab", "FedPick": "FedPick"}
    checked = []
    for page in gen.PAGES:
        for section in page.sections:
            if not section.counted or section.diagnosis:
                continue
            baselines = [r for r in section.rows if r.paper in paper and r.paper[4] in ("acc", "Acc_mean")
                         and own[r.paper[0]] not in r.paper[3]]
            if not baselines:
                continue
            best = max(baselines, key=lambda r: paper[r.paper])
            if best.repeat_of or best.run_file is None:
                continue
            seeds = tomllib.loads((REPO / "benchmarks" / "paper" / best.run_file).read_text())["seeds"]
            assert len(seeds) >= 3, f"{page.slug}, {section.title}: the best baseline {best.method} has {seeds}"
            checked.append((page.slug, section.title, best.method))
    # Tables 1 (both columns), 3, 4 (both columns), 6, 8 and 10 of FedPAC; Tables 1 and 2 of FedCollab
    assert len(checked) >= 10, checked
    assert ("fedpac_table4", "20 clients, full participation", "FedEM-FT (M=5)") in checked

def test_a_cell_read_from_its_base_run_equals_its_direct_run():
    """Where a cell has both a finished direct run (``results.json``) and its number read from another cell's
    run by ``benchmarks/evaluate_variant.py`` (``from_<cell>.json``), the two give each client the same
    accuracy: the training is the same, so only the evaluation could differ."""
    import numpy as np

    pairs = []
    for derived in sorted((REPO / "benchmarks" / "results").rglob("from_*.json")):
        data = json.loads(derived.read_text())
        direct = derived.with_name("results.json")
        if "source_run" not in data or not direct.exists():
            continue
        run = json.loads(direct.read_text())
        if run.get("status") != "finished":
            continue
        (last,) = data["personalized_history"]
        (same,) = [h for h in run["personalized_history"] if h["round"] == last["round"]]
        np.testing.assert_allclose(last["accuracy"], same["accuracy"], atol=1e-6, err_msg=str(derived))
        pairs.append(derived)
    assert pairs, "no cell has both a direct run and one read from its base run"


def test_a_seed_in_progress_waits_outside_the_mean(tmp_path, monkeypatch):
    """A seed still running beside a finished one is left out of the cell's mean (it would mix lengths) and
    named in its status; the cell counts as complete on its finished seeds. Seeds that have no file are
    listed as not run yet."""
    gen = _generator()
    real = gen.expand
    monkeypatch.setattr(gen, "expand", lambda pattern: sorted(tmp_path.glob("cell/seed*/results.json"))
                        if pattern == "cell" else real(pattern))
    for seed, rounds, accuracy in ((0, 200, 0.9), (1, 30, 0.5)):
        path = tmp_path / "cell" / f"seed{seed}" / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"seed": seed, "rounds_completed": rounds, "run": {"rounds": 200},
                                    "command": "demo", "final_accuracy": {"mean": 100 * accuracy},
                                    "personalized_history": [{"round": rounds, "accuracy": [accuracy]}]}))
    row = gen.Row("FedAvg", ("cell",), gen.FINAL, None, run_file="fedpac/table2_fmnist/both.toml")
    (cell,), _ = gen.read_section(gen.Section("demo", (row,), paper_rounds=200), {}, [])
    assert cell.values == [90.0] and cell.complete and len(cell.files) == 1
    assert cell.pending == [(1, 30)] and cell.missing_seeds == [2]
    assert "seed 1 in progress (round 30), not in the mean yet" in cell.status
    assert "seed 2 of the run file's 3 not run yet" in cell.status


def test_a_seed_in_progress_is_timed_from_its_packed_checkpoint(tmp_path, monkeypatch):
    """A seed running beside a finished one gets the CPU time to finish from the round its committed packed
    checkpoint holds, at its own seconds per round, and the scoreboard's seeds table adds that time to the
    time of the seeds not run yet."""
    from pflax import checkpoint
    from pflax.core.federated import State

    import jax

    gen = _generator()
    real = gen.expand
    monkeypatch.setattr(gen, "expand", lambda pattern: sorted(tmp_path.glob(f"{pattern}/seed*/results.json"))
                        if pattern.startswith("cell") else real(pattern))
    for folder, packed_round in (("cell_packed", 60), ("cell_unpacked", None)):
        for seed, rounds, per_round in ((0, 200, 4.0), (1, 60, 5.0)):
            path = tmp_path / folder / f"seed{seed}" / "results.json"
            path.parent.mkdir(parents=True)
            history = [{"round": r, "seconds": per_round} for r in range(1, rounds + 1)]
            path.write_text(json.dumps({
                "seed": seed, "rounds_completed": rounds, "run": {"rounds": 200}, "command": "demo",
                "final_accuracy": {"mean": 90.0}, "history": history, "sessions": [{"device_kind": "cpu"}],
                "personalized_history": [{"round": rounds, "accuracy": [0.9]}]}))
        if packed_round is not None:
            state = State.create(jax.random.PRNGKey(0), {}, {}, 2, None, None).replace(round=packed_round)
            run = tmp_path / folder / "seed1"
            checkpoint.save(run / "checkpoints", state)
            checkpoint.pack(run / "checkpoints", run / "checkpoint.tar.gz")
    rows = [gen.Row("FedAvg", (folder,), gen.FINAL, None, run_file="fedpac/table1_fmnist/fedavg.toml")
            for folder in ("cell_packed", "cell_unpacked")]
    packed, unpacked = gen.read_section(gen.Section("demo", tuple(rows), paper_rounds=200), {}, [])[0]
    assert packed.pending == [(1, 60)] and packed.pending_s == pytest.approx(140 * 5.0)
    assert "seed 1 in progress (round 60), not in the mean yet, about 12 min of CPU to finish from the packed " \
           "checkpoint of round 60" in packed.status
    assert unpacked.pending_s == pytest.approx(200 * 5.0)
    assert "about 17 min of CPU to finish (no packed checkpoint committed: it starts again)" in unpacked.status
    # The run file lists seeds 0, 1, 2: seed 2 is timed at the finished seed's 200 x 4 s.
    assert packed.missing_seeds == [2] and packed.missing_seeds_s == pytest.approx(800.0)
    assert packed.seeds_to_go_s == pytest.approx(700.0 + 800.0)


def test_a_seed_that_diverged_has_ended_and_is_given_no_time_to_go(tmp_path, monkeypatch):
    """A run that diverged (``diverged_at_round`` in its file) is not in progress: its status says which round
    produced NaN/Inf and after which round its number is, it gets no CPU time to the paper's length (more
    rounds would diverge again), and beside a finished seed it is not waited for."""
    gen = _generator()
    real = gen.expand
    monkeypatch.setattr(gen, "expand", lambda pattern: sorted(tmp_path.glob(f"{pattern}/seed*/results.json"))
                        if pattern.startswith("cell") else real(pattern))
    history = [{"round": r, "seconds": 3.0} for r in range(1, 162)]
    for folder, seed, rounds, diverged in (("cell_alone", 0, 161, 162), ("cell_pair", 0, 200, None),
                                           ("cell_pair", 1, 161, 162)):
        path = tmp_path / folder / f"seed{seed}" / "results.json"
        path.parent.mkdir(parents=True)
        data = {"seed": seed, "rounds_completed": rounds, "run": {"rounds": 200}, "command": "demo",
                "final_accuracy": {"mean": 80.0 + seed}, "history": history, "sessions": [{"device_kind": "cpu"}],
                "personalized_history": [{"round": rounds, "accuracy": [0.8]}]}
        path.write_text(json.dumps(data if diverged is None else {**data, "diverged_at_round": diverged}))
    alone = gen.Row("FedAvg", ("cell_alone",), gen.FINAL, None, run_file="fedpac/table1_fmnist/fedavg.toml")
    pair = gen.Row("FedAvg", ("cell_pair",), gen.FINAL, None, run_file="fedpac/table1_fmnist/fedavg.toml")
    (one, two), _ = gen.read_section(gen.Section("demo", (alone, pair), paper_rounds=200), {}, [])
    assert one.status.startswith("diverged: round 162 of 200 produced NaN/Inf; the number is after round 161")
    assert not one.complete and one.to_go is None and one.running() == []
    assert "CPU to reach" not in one.status
    assert two.pending == [] and two.values == [80.0, 81.0] and two.running() == []
    assert two.status.startswith("diverged: round 162 of 200")
    # Ended, so not among the cells that can go on: the README's table of unfinished cells leaves them out,
    # and the projection keeps their gap (80.0 and 80.5 against 90.0: not within).
    assert not one.can_go_on and not two.can_go_on and gen.unfinished([one, two])["cells"] == 0
    for cell in (one, two):
        cell.paper = 90.0
    counted = gen.Section("demo", (alone, pair), paper_rounds=200)
    page = gen.RenderedPage(page=None, text="", sections=[(counted, [one, two])])
    assert counted.counted and gen.if_not_run_land_within([page]) == (0, 2)


def test_missing_seeds_are_timed_by_the_cells_finished_seeds(tmp_path, monkeypatch):
    """The CPU time of a cell's seeds not run yet is the median of its finished seeds' own time (a seed of the
    experiment loop: its typical round times its rounds; a seed trained in coalitions: its ``timing.total_s``),
    not the scaled estimate of another setting, which serves only a cell with no timed seed."""
    gen = _generator()
    real = gen.expand
    monkeypatch.setattr(gen, "expand", lambda pattern: sorted(tmp_path.glob(f"{pattern}/seed*/results.json"))
                        if pattern.startswith("cell") else real(pattern))
    base = {"rounds_completed": 200, "run": {"rounds": 200}, "command": "demo", "final_accuracy": {"mean": 90.0},
            "personalized_history": [{"round": 200, "accuracy": [0.9]}]}
    history = [{"round": r, "seconds": 3.0} for r in range(1, 201)]
    for seed, data in ((0, {"history": history}), (1, {"timing": {"total_s": 900.0}}),
                       (2, {"timing": {"total_s": 1500.0}})):
        path = tmp_path / "cell_timed" / f"seed{seed}" / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**base, "seed": seed, **data}))
    path = tmp_path / "cell_untimed" / "seed0" / "results.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**base, "seed": 0}))
    run_file = "fedcollab/fedcollab_table1_fmnist/ditto__fedcollab.toml"  # seeds 0 to 4
    rows = (gen.Row("timed", ("cell_timed",), gen.FINAL, None, run_file=run_file),
            gen.Row("untimed", ("cell_untimed",), gen.FINAL, None, run_file=run_file))
    (timed, untimed), _ = gen.read_section(gen.Section("demo", rows, paper_rounds=200), {}, [])
    assert timed.missing_seeds == [3, 4] and untimed.missing_seeds == [1, 2, 3, 4]
    assert timed.missing_seeds_s == pytest.approx(2 * 900.0)  # the median of 600, 900 and 1500 s
    assert "seeds 3, 4 of the run file's 5 not run yet, about 30 min of CPU" in timed.status
    estimate = gen.cpu_estimate(run_file)
    assert untimed.missing_seeds_s == pytest.approx(4 * estimate["seconds"] / estimate["seeds"])


def test_fedcollab_ipr_and_rsd_are_those_of_the_committed_runs():
    """IPR and RSD of FedAvg's FedCollab cells (``against_local.json``, one per seed) are recomputed from the
    cell's and the Local cell's committed per-client accuracies of the same seed, every run finished at the
    paper's 200 rounds."""
    gen = _generator()
    results = REPO / "benchmarks/results"
    local_folder = gen._COLLAB_CELLS["Local"][0]
    for key, (folder, _) in gen._COLLAB_CELLS.items():
        if key == "Local":
            continue
        checked = 0
        for derived_path in sorted((results / folder).glob("seed*/against_local.json")):
            seed_folder = derived_path.parent.name
            ours = json.loads((derived_path.parent / "results.json").read_text())
            local = json.loads((results / local_folder / seed_folder / "results.json").read_text())
            assert ours["seed"] == local["seed"] == int(seed_folder[4:]), (key, seed_folder)
            if ours["status"] != "finished" or local["status"] != "finished":
                continue  # a seed in progress: its page cell says so and leaves it out of the mean
            assert ours["rounds_completed"] == 200 == ours["run"]["rounds"] == local["rounds_completed"], key
            derived = json.loads(derived_path.read_text())
            assert derived["local"] == f"benchmarks/results/{local_folder}/{seed_folder}/results.json"
            assert derived["cell"] == f"benchmarks/results/{folder}/{seed_folder}/results.json"
            ipr, rsd = ipr_rsd(np.asarray(ours["final_per_client"]), np.asarray(local["final_per_client"]))
            assert (derived["IPR"], derived["RSD"], derived["rounds_completed"]) == (ipr, rsd, 200), key
            checked += 1
        assert checked, key


# README headline rows that quote a results page: (the row's first cell, page, section, method).
README_QUOTES = (
    ("FedPAC, Fashion-MNIST, 20 clients, 200 rounds", "fedpac_table1.md", "20 clients, full participation", "FedPAC"),
    ("FedPAC, Fashion-MNIST, 100 clients, C = 0.3", "fedpac_table1.md", "100 clients, participation C = 0.3",
     "FedPAC"),
    ("FedAvg + FedCollab, label-shift Fashion-MNIST, 20 clients", "fedcollab_table1.md", "Acc", "FedAvg + FedCollab"),
    ("FedPick, MNIST client of cross-domain digits, 300 rounds", "fedpick_table2.md", "MNIST, the paper's 300 rounds",
     "FedPick"),
)


def _section_rows(page: str, title: str) -> list[dict]:
    part = (DOCS / page).read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    (table,) = [t for t in parse_tables(part) if t["header"][:2] == ["method", "ours"]]
    return table["rows"]


@pytest.mark.parametrize("quote", README_QUOTES, ids=lambda q: q[0])
def test_readme_headline_numbers_are_the_results_pages(quote):
    """Each README headline number is the page's cell: the same mean (and ± std), seeds and paper number."""
    label, page, section, method = quote
    (line,) = [ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith(f"| {label} |")]
    ours, reference = [c.strip() for c in line.strip("|").split("|")][1:3]
    (row,) = [r for r in _section_rows(page, section) if r["method"] == method]
    assert ours.startswith(f"{row['ours']} %"), (ours, row["ours"])
    seeds = int(row["seeds"])
    assert f"{seeds} seed" in ours or seeds == 1 and "seed" not in ours, (ours, seeds)
    assert reference.startswith(f"paper {row['paper']} %"), (reference, row["paper"])


def test_the_sources_name_the_machine_of_each_run(tmp_path):
    gen = _generator()
    gpu = {"backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}
    cpu = {"backend": "cpu", "device_kind": "cpu"}
    files = {"moved.json": {"jax": cpu, "sessions": [{"from_round": 0, **gpu}, {"from_round": 90, **cpu}]},
             "one.json": {"jax": gpu, "sessions": [{"from_round": 0, **gpu}]},
             "resumed_here.json": {"sessions": [{"from_round": 0, **cpu}, {"from_round": 50, **cpu}]},
             "older.json": {"jax": {"backend": "cpu", "version": "0.4.30"}},
             "none.json": {"arm": "fedavg"},
             # an evaluation of another run's final state (benchmarks/evaluate_variant.py) names that run
             "variant.json": {"source_run": str(tmp_path / "one.json")},
             # an older evaluation of a run's checkpoints, whose run has since moved into seed folders
             "run/seed0/from_run.json": {"source_checkpoints": str(tmp_path / "run" / "checkpoints")},
             "run/seed0/results.json": {"sessions": [{"from_round": 0, **cpu}]}}
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(data))
    assert {name: gen.machine_of(tmp_path / name) for name in files} == {
        "moved.json": "NVIDIA H100 80GB HBM3 from round 0, then cpu from round 90",
        "one.json": "NVIDIA H100 80GB HBM3", "resumed_here.json": "cpu", "older.json": "cpu",
        "none.json": "not recorded", "variant.json": "NVIDIA H100 80GB HBM3 (the run it evaluates)",
        "run/seed0/from_run.json": "cpu (the run it evaluates)", "run/seed0/results.json": "cpu"}
    pages = "".join(p.read_text() for p in (REPO / "docs" / "results").glob("*.md"))
    assert pages.count("| trained on |") == len(gen.PAGES)


# ---------------------------------------------------------------------------------------------
# (c) the figures plot what the pages read
# ---------------------------------------------------------------------------------------------

FIGURE_LINK = re.compile(r"!\[[^\]]*\]\(figures/([^)]+\.svg)\)")


def _curve_from_file(data: dict, domain: int | None) -> dict[int, float]:
    """A results file's accuracy curve, read independently of the generator."""
    if domain is not None:
        return {r: acc[domain] for r, acc in zip(data["eval_rounds"], data["accuracy_curve"])}
    return {e["round"]: 100 * sum(e["accuracy"]) / len(e["accuracy"]) for e in data["personalized_history"]}


@pytest.fixture(scope="module")
def site():
    """The generator's pages and figures, rendered once for this module's figure tests."""
    return _generator().render_site()


def _section_of(text: str, heading: str) -> str:
    """The one ``## heading`` section of a page's text (a heading may end in its round), from its heading on."""
    (part,) = [p for p in text.split("\n## ")[1:]
               if re.fullmatch(re.escape(heading) + r"( \(round \d+\))?", p.splitlines()[0])]
    return part


def _section_text(page: str, heading: str) -> str:
    return _section_of((DOCS / page).read_text(), heading)


def test_every_committed_figure_is_linked_and_current(site):
    """Each SVG under docs/results/figures/ is linked from a page and carries the fingerprint of the data
    the generator plots; each linked figure exists."""
    pages, figures = site
    linked = {name for text in pages.values() for name in FIGURE_LINK.findall(text)}
    committed = {p.name for p in (DOCS / "figures").glob("*.svg")}
    assert linked == committed == {f.name for f in figures}
    for f in figures:
        description = re.search(r"<dc:description>(.*?)</dc:description>", (DOCS / "figures" / f.name).read_text())
        assert description and description.group(1) == f.fingerprint, f"{f.name}: regenerate the figures"


def test_every_curve_is_the_mean_of_its_cells_results_files(site):
    """Each plotted curve, recomputed from the results files it names: the mean over those files of their
    evaluations at the rounds they share; the files are the cell's seeds on its page (same count), and the
    figure is linked from that cell's section, beside the paper number the section's table prints."""
    _, figures = site
    curves = [f for f in figures if f.kind == "curves"]
    assert len(curves) >= 20
    for f in curves:
        page = f.name.rsplit("-", 1)[0] + ".md"
        text = _section_text(page, f.data["section"])
        assert f"](figures/{f.name})" in text
        rows = {row["method"]: row for row in parse_tables(text)[0]["rows"]}
        for s in f.data["series"]:
            per_file = [_curve_from_file(json.loads((REPO / path).read_text()), s["domain"]) for path in s["files"]]
            rounds = sorted(set.intersection(*(set(c) for c in per_file)))
            assert s["rounds"] == rounds, (f.name, s["label"])
            expected = [sum(c[r] for c in per_file) / len(per_file) for r in rounds]
            np.testing.assert_allclose(s["accuracy"], expected, atol=1e-4, err_msg=f"{f.name}: {s['label']}")
            row = rows[s["label"]]
            assert int(row["seeds"]) == len(s["files"]) == s["seeds"], (f.name, s["label"])
            assert row["paper"] == ("—" if s["paper"] is None else f"{s['paper']:.2f}"), (f.name, s["label"])


def test_a_stale_missing_or_extra_figure_is_caught_and_redrawn(site, tmp_path, monkeypatch, capsys):
    gen = _generator()
    pages, _ = site
    figure = gen.Figure("t-1.svg", "curves", {"page": "T", "section": "s", "paper_rounds": 20, "series": [
        {"label": "A", "rounds": [10, 20], "accuracy": [50.0, 60.0], "paper": 61.0, "seeds": 1, "domain": None,
         "files": []}]})
    monkeypatch.setattr(gen, "render_site", lambda: (pages, [figure]))
    monkeypatch.setattr(gen, "DOCS", tmp_path)
    monkeypatch.setattr(gen, "FIGURES", tmp_path / "figures")
    assert gen.main(["--check"]) == 1
    assert "figures/t-1.svg does not plot the data" in capsys.readouterr().out
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "old.svg").write_text("<svg/>")
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    assert not (tmp_path / "figures" / "old.svg").exists()
    drawn = (tmp_path / "figures" / "t-1.svg").read_text()
    assert figure.fingerprint in drawn and "<svg" in drawn
    # A current figure is not redrawn; one whose data changed is caught, then redrawn.
    assert "redrew 0 of 1 figures" in (gen.main([]), capsys.readouterr().out)[1]
    changed = gen.Figure("t-1.svg", "curves", {**figure.data, "paper_rounds": 30})
    monkeypatch.setattr(gen, "render_site", lambda: (pages, [changed]))
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0 and changed.fingerprint in (tmp_path / "figures" / "t-1.svg").read_text()


def test_table10_angles_note_compares_each_method_with_itself_at_our_angles(monkeypatch):
    """The rotation table's angles diagnosis: Local-only's and FedPAC's seed-0 change from our angles to the
    milder ones, their gaps to the paper and FedPAC's lead over Local-only in each and in the paper; a plain
    "not measured yet" until both milder runs have finished."""
    gen = _generator()
    paper = paper_csv()
    local_paper, pac_paper = (paper[("FedPAC", "10", gen.T10_SETTING, m, "acc")] for m in ("Local-only", "FedPAC"))

    def run(value, seed=0, peak=None):  # a curve that peaks at round 100 (``peak``) and ends at ``value``
        history = [{"round": r, "accuracy": [a / 100] * 2} for r, a in ((100, peak or value), (200, value))]
        return {"status": "finished", "seed": seed, "final_accuracy": {"mean": value}, "personalized_history": history}

    finished = {"table10_fmnist/local_only": [run(78.0)], "table10_fmnist/fedpac": [run(81.0, 1), run(82.0, 0, 84.0)],
                "table10_fmnist/local_only__angles_0_to_60": [run(79.0)]}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: finished.get(cell, []))
    assert "not measured yet" in gen._t10_angles_note()
    finished["table10_fmnist/fedpac__angles_0_to_60"] = [run(85.0, 0, 85.5)]
    note = gen._t10_angles_note()
    assert ("FedPAC's curve peaks at round 100 and falls 0.5 points from there to the end, against 2.0 from round "
            "100 with our angles, so the milder angles remove most of the late fall") in note
    assert (f"Local-only, which shares nothing, moves +1.00 points (to 79.00, {79.0 - local_paper:+.2f} from the "
            f"paper) and FedPAC +3.00 (to 85.00, {85.0 - pac_paper:+.2f} from the paper; seed 0 of each)") in note
    assert (f"FedPAC is +4.00 from Local-only with our angles, +6.00 with these and {pac_paper - local_paper:+.2f} "
            "in the paper") in note
    assert "these angles bring FedPAC within the tolerance" in note  # 85.0 is within 1.5 of the paper's 85.56
    finished["table10_fmnist/fedpac__angles_0_to_60"] = [run(83.0, 0, 85.0)]
    note = gen._t10_angles_note()
    assert "so the late fall is not the angles' doing" in note
    assert "these angles close part of FedPAC's gap, not all of it" in note


def test_the_width1_cnn_at_300_rounds_is_a_diagnosis_timed_at_the_width1_pace():
    """The width-1 CNN's 300-round cells on the real-USPS domains are shown with their run files and left out
    of the scoreboard; until they have results, each is estimated at its arm's width-1 CPU pace (seconds per
    round of the 30-round width-1 files), not at the much cheaper width-0.125 pace."""
    import tomllib

    gen = _generator()
    page = (DOCS / "fedpick_table2.md").read_text()
    (part,) = [p for p in page.split("\n## ") if p.startswith("Real USPS: the paper's width-1 CNN at 300 rounds")]
    assert gen.DIAGNOSIS_MARK in part
    (table,) = [t for t in parse_tables(part) if t["header"][0] == "method"]
    assert [row["method"] for row in table["rows"]] == ["FedPick", "FedBN"]
    for row, arm in zip(table["rows"], ("fedpick", "fedbn")):
        assert row["counted"] == "no"
        run_file = f"fedpick/fedpick_table2_usps_width1_300/{arm}.toml"
        spec = tomllib.loads((REPO / "benchmarks" / "paper" / run_file).read_text())
        assert (spec["rounds"], spec["model"]["width"], spec["seeds"]) == (300, 1.0, [0])
        if row["ours"] != DASH:
            continue
        paces = [gen.measured_seconds_per_round(data)
                 for path in sorted((REPO / "benchmarks" / "results" / "fedpick_domains_width1").glob(f"{arm}_seed*.json"))
                 if (data := json.loads(path.read_text()))["width"] == 1.0 and gen.trained_on_cpu(data)]
        assert paces, f"no width-1 run of {arm} to time its 300-round cell by"
        assert f"about {gen.fmt_duration(300 * statistics.median(paces))} of CPU" in row["status"]
        narrow = gen.cpu_estimate(f"fedpick/fedpick_table2_usps_300/{arm}.toml")
        assert gen.cpu_estimate(run_file)["seconds"] > 2 * narrow["seconds"] / narrow["seeds"]


def test_the_generators_docstring_examples_run():
    import doctest

    result = doctest.testmod(_generator(), optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 7 and result.failed == 0


def _own_seconds_per_seed(data: dict) -> float:
    """A finished experiment-loop run's CPU seconds, read here without the generator: its median round
    plus its median evaluation spread over the rounds, times the rounds."""
    history = data["history"]
    rounds = data.get("rounds_completed") or len(history)
    evals = [row["eval_seconds"] for row in history if "eval_seconds" in row]
    per_eval = statistics.median(evals) * len(evals) / rounds if evals else 0.0
    return (statistics.median(row["seconds"] for row in history) + per_eval) * rounds


def test_the_estimates_are_checked_on_finished_runs_they_do_not_time_themselves():
    gen = _generator()
    paper = gen.paper_numbers()
    checks = gen.estimate_checks([gen.render_page(page, paper) for page in gen.PAGES])
    paths = [c.path.resolve() for c in checks]
    assert len(paths) == len(set(paths)) and len(paths) >= 50
    assert not set(paths) & gen.timing_reference_files()
    assert [c.ratio for c in checks] == sorted(c.ratio for c in checks)
    for c in checks:
        data = json.loads(c.path.read_text())
        planned = (data.get("args") or data.get("run") or {}).get("rounds") or data["rounds_planned"]
        assert data["rounds_completed"] >= planned, f"{c.path} has not finished"
        assert all(s.get("backend", "cpu") == "cpu" for s in data.get("sessions", [])), f"{c.path}: not a CPU run"
        assert "arm" not in tomllib.loads((REPO / "benchmarks" / "paper" / c.run_file).read_text())
        if "history" in data and all("seconds" in row for row in data["history"]):
            measured = _own_seconds_per_seed(data)
        else:  # a seed trained in coalitions: their rounds and evaluations together
            measured = data["timing"]["total_s"]
        est = gen.cpu_estimate(c.run_file)
        assert c.ratio == pytest.approx(measured / (est["seconds"] / est["seeds"])), c.path
        assert (c.setting == gen.COLLAB_SETTING) == c.path.relative_to(RESULTS).parts[0].startswith("fedcollab")
    # the scoreboard prints each setting's count, median and range of exactly these ratios
    readme = (DOCS / "README.md").read_text()
    for setting in (gen.FEDPAC_SETTINGS, gen.COLLAB_SETTING):
        ratios = sorted(c.ratio for c in checks if c.setting == setting)
        assert f"in {setting}, {len(ratios)} runs, median {statistics.median(ratios):.2f}, middle half " in readme
        assert f"range {ratios[0]:.2f}–{ratios[-1]:.2f}" in readme


def test_the_scaffold_check_note_reads_each_columns_check_beside_its_cell(monkeypatch):
    """Table 4's SCAFFOLD diagnosis: each column's momentum-corrected run, once finished, is read nearer to the
    paper than its cell or further, against the cell's own number."""
    gen = _generator()
    paper = paper_csv()
    far = paper[("FedPAC", "4", "FMNIST/100clients_frac0.3", "SCAFFOLD", "acc")]
    near = paper[("FedPAC", "4", "FMNIST/20clients_frac1.0", "SCAFFOLD", "acc")]
    finals = {"table1_fmnist_100clients/scaffold": far - 2.0, "table1_fmnist/scaffold": near - 0.5}
    monkeypatch.setattr(gen, "_mean_final", finals.get)
    note = gen._scaffold_check_note()
    assert "`python benchmarks/paper/run_table.py fedpac/table4_scaffold_check` runs them." in note
    assert f"With 100 clients the check has not finished yet (the cell: {far - 2.0:.2f}, -2.00)." in note
    assert f"With 20 clients the check has not finished yet (the cell: {near - 0.5:.2f}, -0.50)." in note
    finals[gen.SCAFFOLD_CHECK.format(clients=100)] = far - 1.0
    finals[gen.SCAFFOLD_CHECK.format(clients=20)] = near - 1.25
    note = gen._scaffold_check_note()
    assert (f"With 100 clients the check ends at {far - 1.0:.2f}, -1.00 from the paper, nearer to it and within "
            "the tolerance, so the swing accounts for part of the gap") in note
    assert (f"With 20 clients the check ends at {near - 1.25:.2f}, -1.25 from the paper, further from it, so the "
            "swing is not the gap") in note


def test_the_fedrod_check_is_read_against_the_cells_seed_0(monkeypatch):
    """Table 3's Fed-RoD diagnosis: the joint-training run of seed 0 is set beside the cell's seed 0, nearer to
    the paper or further; nothing is read before both have finished."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "3", "FMNIST/concept_shift_20clients", "Fed-RoD", "acc")]
    finals = {"table3_fmnist/fedrod": here - 1.25}
    monkeypatch.setattr(gen, "_seed_run", lambda cell, seed=0: (
        {"final_accuracy": {"mean": finals[cell]}} if cell in finals else None))
    assert gen._fedrod_check_reading() == ""
    assert gen._fedrod_check_note().endswith("It has no finished run yet.")
    finals[gen.FEDROD_CHECK] = here - 0.5
    assert gen._fedrod_check_reading() == (
        f": it ends at {here - 0.5:.2f}, -0.50 from the paper, against {here - 1.25:.2f} (-1.25) for the cell's "
        "seed 0, +0.75 from it, so what the personal loss trains accounts for part of the gap")
    finals[gen.FEDROD_CHECK] = here - 2.0
    assert gen._fedrod_check_note().endswith("-0.75 from it, so what the personal loss trains is not the gap.")


def test_the_hypcluster_note_sets_the_seeds_that_lost_a_cluster_beside_those_that_kept_all(monkeypatch):
    """Table 4's HypCluster (k=3) note, 20 clients: silent within the tolerance; past it, the seeds whose last
    round left a hypothesis without clients against those that used all three, and the reading follows which
    group ends higher."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "4", "FMNIST/20clients_frac1.0", "HypCluster (k=3)", "acc")]

    def run(seed, final, hypotheses_used):
        losses = [[0.0 if h == i % hypotheses_used else 1.0 for h in range(3)] for i in range(5)]
        history = [{"round": r, "accuracy": [final / 100] * 5} for r in range(100, 201, 10)]
        return {"seed": seed, "final_accuracy": {"mean": final}, "personalized_history": history,
                "last_round": {"cluster_losses": losses}}

    runs = {"table1_fmnist/hypcluster__k_3": [run(0, here - 1.0, 2), run(1, here - 1.2, 3)]}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: runs.get(cell, []))
    assert gen._hypcluster_t4_note() == ""  # within the tolerance
    runs["table1_fmnist/hypcluster__k_3"] = [run(0, here - 2.0, 2), run(1, here - 2.5, 3), run(2, here - 2.2, 2)]
    note = gen._hypcluster_t4_note()
    assert note.startswith("**HypCluster (k=3)** ends 2.23 points under the paper after the full 200 rounds, the "
                           "mean of 3 seeds.")
    assert (f"seed 1 ends at {here - 2.5:.2f} with all 3 hypotheses in use, and seeds 0 and 2 end at "
            f"{here - 2.0:.2f} and {here - 2.2:.2f} with a lost cluster") in note
    assert "the seeds with a lost cluster end 0.40 points above those without, so the lost cluster is not the gap" in note
    assert "Our HypCluster (k=5)" not in note
    runs["table1_fmnist/hypcluster__k_3"] = [run(0, here - 2.6, 2), run(1, here - 1.6, 3)]
    runs["table1_fmnist/hypcluster__k_5"] = [run(0, here - 0.2, 5)]
    note = gen._hypcluster_t4_note()
    assert "end 1.00 points below those without, so the lost cluster accounts for part of the gap." in note
    assert note.endswith(f"Our HypCluster (k=5) ends at {here - 0.2:.2f}, -0.20 from the paper's k = 3 and "
                         f"{here - 0.2 - paper_csv()[('FedPAC', '4', 'FMNIST/20clients_frac1.0', 'HypCluster (k=5)', 'acc')]:+.2f}"
                         " from its k = 5.")


def test_the_fedem_check_note_reads_each_fedem_ft_check_beside_its_cell(monkeypatch):
    """The FedEM diagnosis's FedEM-FT rows: the note waits for each check's evaluation, then reads it beside the
    cell's FedEM-FT and the paper's, M = 3 with 100 clients first, then M = 5 with 20 clients."""
    gen = _generator()
    here3 = paper_csv()[("FedPAC", "4", "FMNIST/100clients_frac0.3", "FedEM-FT (M=3)", "acc")]
    here5 = paper_csv()[("FedPAC", "4", "FMNIST/20clients_frac1.0", "FedEM-FT (M=5)", "acc")]
    numbers = {gen.FEDEM_FT_CELL: here3 - 0.58, gen.FEDEM5_FT_CELL: here5 - 2.18}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: [])
    monkeypatch.setattr(gen, "_cell_number", numbers.get)
    assert gen._fedem_check_note().endswith(
        "reads the check's from its run once that has finished. FedEM-FT (M=3) with 100 clients: the check's has "
        "not been read yet. FedEM-FT (M=5) with 20 clients: the check's has not been read yet.")
    numbers[gen.FEDEM_FT_CHECK] = here3 - 2.0
    assert gen._fedem_check_note().endswith(
        f"FedEM-FT (M=3) with 100 clients: the check's ends at {here3 - 2.0:.2f}, -2.00 from the paper, further "
        f"from it, so the server step is not the gap (the cell: {here3 - 0.58:.2f}, -0.58). FedEM-FT (M=5) with 20 "
        "clients: the check's has not been read yet.")
    numbers[gen.FEDEM5_FT_CHECK] = here5 - 1.0
    assert gen._fedem_check_note().endswith(
        f"FedEM-FT (M=5) with 20 clients: the check's ends at {here5 - 1.0:.2f}, -1.00 from the paper, nearer to "
        f"it and within the tolerance, so the server step accounts for part of the gap (the cell: "
        f"{here5 - 2.18:.2f}, -2.18).")


def test_the_fedem_check_note_reads_the_check_and_its_mixture_weights(monkeypatch):
    """Table 4's FedEM diagnosis: a column is read only once both of its runs finish; then the check's end beside
    the cell and the paper, and how many of each run's last-round clients put 0.9 of their weight on one component."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "4", "FMNIST/20clients_frac1.0", "FedEM (M=3)", "acc")]
    runs = {"table1_fmnist/fedem__m_3": [{"final_accuracy": {"mean": here + 2.6},
                                          "last_round": {"pi": [[1.0, 0.0, 0.0], [0.05, 0.95, 0.0]]}}]}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: runs.get(cell, []))
    assert ("`python benchmarks/paper/run_table.py fedpac/table4_fedem_check`. With 20 clients the check has no "
            "finished run yet. With 100 clients the check has no finished run yet. With M = 5 and 20 clients the "
            "check has no finished run yet. The FedEM-FT") in gen._fedem_check_note()
    runs[gen.FEDEM_CHECK.format(clients=20)] = [{"final_accuracy": {"mean": here + 0.5},
                                                 "last_round": {"pi": [[0.5, 0.3, 0.2], [0.1, 0.9, 0.0]]}}]
    assert (f" With 20 clients the check ends at {here + 0.5:.2f}, +0.50 from the paper, nearer to it and within "
            f"the tolerance, so the server step accounts for part of the gap (the cell: {here + 2.6:.2f}, +2.60); in "
            "its last round 1 of its 2 clients put at least 0.9 of their mixture weight on one component (the cell: "
            "2 of 2). With 100 clients the check has no finished run yet.") in gen._fedem_check_note()


def test_the_fedem_check_note_reads_the_five_component_check_beside_the_cells_seeds(monkeypatch):
    """The M = 5 column: its cell has three seeds and its check seed 0 alone, so the note gives the cell's mean
    over its seeds and its seed 0, and counts the one-component clients of the cell's seed 0."""
    gen = _generator()
    here = paper_csv()[("FedPAC", "4", "FMNIST/20clients_frac1.0", "FedEM (M=5)", "acc")]
    one_heavy = {"pi": [[0.95, 0.05, 0, 0, 0], [0.2, 0.2, 0.2, 0.2, 0.2]]}
    spread = {"pi": [[0.5, 0.5, 0, 0, 0], [0.2, 0.2, 0.2, 0.2, 0.2]]}
    runs = {"table1_fmnist/fedem__m_5": [{"final_accuracy": {"mean": here + m}, "last_round": one_heavy}
                                         for m in (2.0, 3.0, 2.5)],
            gen.FEDEM5_CHECK.format(clients=20): [{"final_accuracy": {"mean": here + 3.5}, "last_round": spread}]}
    monkeypatch.setattr(gen, "_finished_runs", lambda cell: runs.get(cell, []))
    assert (f" With M = 5 and 20 clients the check ends at {here + 3.5:.2f}, +3.50 from the paper, further from it, "
            f"so the server step is not the gap (the cell: {here + 2.5:.2f}, +2.50, over its 3 seeds; its seed 0: "
            f"{here + 2.0:.2f}); in its last round 0 of its 2 clients put at least 0.9 of their mixture weight on one "
            "component (the cell's seed 0: 1 of 2). The FedEM-FT") in gen._fedem_check_note()


def test_the_index_lists_every_diagnosis_row_as_its_page_shows_it():
    """``docs/results/README.md``'s "Diagnosis runs" table has one row per row of every diagnosis section, in
    page order, each with the number and gap its page's section table prints, and no row of a counted section."""
    gen = _generator()
    rendered = [gen.render_page(page, gen.paper_numbers()) for page in gen.PAGES]
    rows = gen.diagnosis_rows(rendered)
    expected = [(r.page.slug, section.title, c.row.method) for r in rendered for section, cells in r.sections
                if section.diagnosis for c in cells]
    assert [(row[1].split("]")[0][1:-3], row[2], row[0]) for row in rows] == expected and expected
    pages = {r.page.slug: r.text for r in rendered}
    for method, slug_link, _, ours, gap, rounds in rows:
        slug = slug_link.split("]")[0][1:-3]
        assert any(line.startswith(f"| {method} | {ours} | ") and f" | {gap} | {rounds} | " in line
                   for line in pages[slug].splitlines()), (slug, method)
    index = (REPO / "docs" / "results" / "README.md").read_text()
    assert "\n".join(gen.table(["run", "page", "section", "ours", "gap", "rounds"], rows)) in index


def test_readings_count_their_measured_cells_and_list_the_cells_no_run_measured(monkeypatch):
    """The README's "Readings left open": per reading, each measured cell's gap now -> the diagnosis run's, the
    cells within 1.5 among the measured ones whose run finished, every counted cell of the method in the
    reading's scope (measured or not), and the sum of the net gains of the readings that gain."""
    from types import SimpleNamespace

    gen = _generator()
    cell_file, check_file = ("fedpac/table1_fmnist/scaffold.toml",
                             "fedpac/table4_scaffold_check/scaffold__momentum_corrected_20clients.toml")

    def cell(label, value, paper=90.0, run_file=cell_file, complete=True, seeds=1):
        row = gen.Row(label, (), gen.FINAL, None, run_file=run_file)
        return gen.Cell(row, "s1", [], "", "", values=[value] * seeds, paper=paper, complete=complete)

    counted = gen.Section("C", (), paper_rounds=200)
    check = gen.Section("D", (), paper_rounds=200, counted=False, diagnosis=True)
    far, near, waiting = cell("SCAFFOLD a", 88.0, seeds=3), cell("SCAFFOLD b", 89.5), cell("SCAFFOLD c", 88.3)
    unrelated = cell("FedAvg", 80.0, run_file="fedpac/table1_fmnist/fedavg.toml")
    checks = [cell("a, read otherwise", 89.7, run_file=check_file), cell("b, read otherwise", 88.2,
                                                                       run_file=check_file),
              cell("c, read otherwise", 89.0, run_file=check_file, complete=False)]
    elsewhere = cell("SCAFFOLD", 88.3, run_file="fedpac/table1_fmnist_100clients/scaffold.toml")
    pages = [gen.RenderedPage(page=SimpleNamespace(slug="fedpac_demo"), text="",
                              sections=[(counted, [far, near, waiting, unrelated]), (check, checks)]),
             gen.RenderedPage(page=SimpleNamespace(slug="fedpac_other"), text="",
                              sections=[(gen.Section("E", (), paper_rounds=200), [elsewhere])])]
    reading = gen.Reading("SCAFFOLD read otherwise", tuple(
        ("fedpac_demo", "C", f"SCAFFOLD {k}", "D", f"{k}, read otherwise") for k in "abc"), ("scaffold",))
    monkeypatch.setattr(gen, "READINGS", (reading,))
    (row,), gain = gen.reading_rows(pages)
    assert row[:3] == ["SCAFFOLD read otherwise", "[fedpac_demo.md](fedpac_demo.md)",
                       "`[config] momentum_corrected_controls = true`"]
    assert row[3].split("<br>") == ["demo, C, SCAFFOLD a: -2.00 → -0.30 (3 seeds → 1)",
                                    "demo, C, SCAFFOLD b: -0.50 → -1.80",
                                    "demo, C, SCAFFOLD c: -1.70 → -1.00 (— / 200 rounds)"]
    # one of the two finished checks within 1.5 before and after; the scope holds the four SCAFFOLD cells, one
    # of them measured by no run
    assert row[4:] == ["1 → 1", "4", "other, E, SCAFFOLD (-1.70)"] and gain == 0
    checks[1].values = [89.0]  # the near cell stays near: a net gain of one
    (row,), gain = gen.reading_rows(pages)
    assert row[4] == "1 → 2" and gain == 1


def test_every_reading_names_real_rows_in_its_own_scope():
    """Each of ``READINGS`` pairs counted cells with rows of a diagnosis section on the same page, the two
    run files differ in some setting, and the counted cell is in the reading's scope (so it is among the cells
    the reading changes, and the README's "not measured" leaves it out)."""
    gen = _generator()
    rendered = {r.page.slug: r for r in (gen.render_page(page, gen.paper_numbers()) for page in gen.PAGES)}
    for reading in gen.READINGS:
        for page, cell_title, method, check_title, label in reading.pairs:
            sections = {section.title: (section, cells) for section, cells in rendered[page].sections}
            section, cells = sections[cell_title]
            (cell,) = [c for c in cells if c.row.method == method]
            assert gen.counted(cell, section), (reading.name, method)
            assert sections[check_title][0].diagnosis, reading.name
            (check,) = [c for c in sections[check_title][1] if c.row.method == label]
            assert gen.setting_change(cell.row.run_file, check.row.run_file), (reading.name, label)
            assert cell.row.run_file.startswith(reading.under), (reading.name, method)
            assert not reading.methods or gen._run_file_method(cell.row.run_file) in reading.methods
