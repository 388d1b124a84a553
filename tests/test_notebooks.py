"""The example notebooks (FedCollab, FedPick, many clients) execute offline and show what they say."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _execute(name: str) -> tuple[str, int]:
    """Run ``notebooks/<name>`` top to bottom; return its printed text and its number of figures."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "save notebooks without outputs"
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    figures = sum("image/png" in o.get("data", {}) for o in outputs)
    return text, figures


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text, re.M)
    assert match, f"{pattern!r} not in the notebook's output:\n{text}"
    return float(match.group(1))


def test_fedcollab_notebook_finds_the_label_groups():
    text, figures = _execute("fedcollab.ipynb")
    assert figures >= 4
    # The solver recovers the three label groups of the eight clients (A: 0-2, B: 3-5, C: 6-7) ...
    coalitions = ast.literal_eval(re.search(r"^coalitions: (\[.*\])$", text, re.M).group(1))
    assert coalitions == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # ... training inside them beats one FedAvg model for all ...
    global_acc = _number(r"FedAvg over all clients ([\d.]+)%", text)
    collab_acc = _number(r"FedAvg inside coalitions ([\d.]+)%", text)
    assert collab_acc > global_acc
    # ... and the newcomer (classes 6-9) joins the clients that share its classes.
    assert "newcomer joins [6, 7] -> coalitions [[0, 1, 2], [3, 4, 5], [6, 7, 8]]" in text
    assert 0.0 <= _number(r"newcomer's accuracy inside its coalition: ([\d.]+)%", text) <= 100.0


def test_fedpick_notebook_shows_masks():
    text, figures = _execute("fedpick.ipynb")
    assert figures >= 3
    assert "mask frequency shape: (6, 128)" in text
    per_client = ast.literal_eval(re.search(r"selected on most samples, per client: (\[.*\])", text).group(1))
    assert len(per_client) == 6 and all(0 < k < 128 for k in per_client)
    assert _number(r"round 10: mean personalized accuracy ([\d.]+)%", text) > 50.0  # 4 classes per client
    same = _number(r"mean overlap: same classes ([\d.]+)", text)
    different = _number(r"different classes ([\d.]+)", text)
    assert 0.0 <= same <= 1.0 and 0.0 <= different <= 1.0


def test_many_clients_notebook_strategies_agree():
    text, figures = _execute("many_clients.ipynb")
    assert figures >= 1
    names = ("vmap", "map", "chunked 8", "chunked 32", "sharded")
    for name in names:  # every strategy computes the same round, to float round-off
        diff = _number(rf"^{name} +vs map: max \|parameter difference\| = ([\d.e+-]+)", text)
        assert diff < 1e-5, (name, diff)
    rows = {}
    for line in text.splitlines():
        for name in names:
            if re.match(rf"{name} +[\d.]+ ", line):
                rows[name] = line[len(name):].split()
    assert set(rows) == set(names), text
    if rows["map"][2] != "n/a":  # the memory plan, where the backend reports one
        temp = {name: float(row[2]) for name, row in rows.items()}
        argument = {float(row[3]) for row in rows.values()}
        assert temp["map"] < temp["vmap"] and temp["chunked 8"] < temp["vmap"]
        assert len(argument) == 1  # the same inputs under every strategy
