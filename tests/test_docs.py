"""The user documentation stays honest: every registry algorithm has a page in docs/algorithms/ that
names every field of its ``Config``, and the docs cite only public material (no private reference
files, no commit hashes)."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from pflax.algorithms import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
INDEX = DOCS / "algorithms" / "README.md"

# Fields every Config shares that the pages document once, in the index, instead of per page.
UNDOCUMENTED_PER_PAGE = {"execution"}

FORBIDDEN = ("../shared", "algorithms.md", "paper_results.csv")
HASH_IN_BACKTICKS = re.compile(r"`([0-9a-fA-F]{7,40})`")
HASH_AFTER_COMMIT = re.compile(r"\bcommits?\b[\s:(`]*([0-9a-fA-F]{7,40})\b", re.IGNORECASE)


def _registry_table(index: str) -> dict[str, list[str]]:
    """``{algorithm name: [page, ...]}`` from the table under the index's "## The registry" heading
    (first column: the name in backticks; the page is the last column's link)."""
    section = index.split("## The registry", 1)[1].split("\n## ", 1)[0]
    pages: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = re.fullmatch(r"`([^`]+)`", cells[0]) if line.lstrip().startswith("|") else None
        if name is None:
            continue
        link = re.search(r"\]\(([^)#]+)", cells[-1])
        pages.setdefault(name.group(1), []).append(link.group(1) if link else "")
    return pages


def test_every_algorithm_has_a_page_listing_its_config_fields():
    pages = _registry_table(INDEX.read_text(encoding="utf-8"))
    problems = []
    unknown = sorted(set(pages) - set(REGISTRY))
    if unknown:
        problems.append(f"index rows that are not registry names: {unknown}")
    for name, algorithm in REGISTRY.items():
        rows = pages.get(name, [])
        if len(rows) != 1:
            problems.append(f"{name}: {len(rows)} rows in the index table (need exactly 1)")
            continue
        page = INDEX.parent / rows[0]
        if not rows[0] or not page.is_file():
            problems.append(f"{name}: the index links to {rows[0]!r}, which does not exist")
            continue
        text = page.read_text(encoding="utf-8")
        missing = [f.name for f in dataclasses.fields(algorithm.Config)
                   if f.name not in UNDOCUMENTED_PER_PAGE and f"`{f.name}`" not in text]
        if missing:
            problems.append(f"{name}: {page.relative_to(ROOT)} does not name the Config fields {missing}")
    assert not problems, "\n".join(problems)


def test_every_page_in_docs_algorithms_is_linked_from_the_index():
    index = INDEX.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#/]+\.md)", index))
    pages = {p.name for p in INDEX.parent.glob("*.md") if p != INDEX}
    assert pages <= linked, f"pages not linked from {INDEX.relative_to(ROOT)}: {sorted(pages - linked)}"


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # images and other binary files
        return []
    found = [f"mentions {word!r}" for word in FORBIDDEN if word in text]
    if path.name != "CHANGELOG.md":
        tokens = HASH_IN_BACKTICKS.findall(text) + HASH_AFTER_COMMIT.findall(text)
        hashes = sorted({t for t in tokens if re.search(r"[0-9]", t) and re.search(r"[a-fA-F]", t)})
        if hashes:
            found.append(f"contains what look like commit hashes: {hashes}")
    return [f"{path.relative_to(root)} {problem}" for problem in found]


def test_docs_cite_no_private_material_and_no_commit_hashes():
    files = sorted(p for p in DOCS.rglob("*") if p.is_file())
    assert files, "docs/ is empty"
    problems = [v for path in files for v in _violations(path)]
    assert not problems, "\n".join(problems)


def test_readme_cites_no_private_material_and_no_commit_hashes():
    problems = _violations(ROOT / "README.md")
    assert not problems, "\n".join(problems)


README_MAX_LINES = 250
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_short_and_for_users():
    """The README is a user's page: at most README_MAX_LINES lines (history goes to CHANGELOG.md,
    performance facts to docs/performance.md), and every relative link in it points to an existing
    file of the repository."""
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"
    links = MARKDOWN_LINK.findall(text)
    relative = [link for link in links if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|#", link)]
    assert relative, "README.md links to no file of the repository"
    broken = [link for link in relative if not (ROOT / link.split("#", 1)[0]).is_file()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


def test_the_checks_catch_what_they_look_for(tmp_path):
    """The patterns flag a hash in backticks or after "commit", and the forbidden names; a hex-free
    or digit-free token passes, and CHANGELOG.md may name commits."""
    bad = tmp_path / "page.md"
    bad.write_text("Fixed at `a1b2c3d`; see commit 0123abcd4 and ../shared/x and paper_results.csv.\n")
    problems = " ".join(_violations(bad, tmp_path))
    for expected in ("a1b2c3d", "0123abcd4", "../shared", "paper_results.csv"):
        assert expected in problems
    good = tmp_path / "ok.md"
    good.write_text("Weights at `1e-3`, the `fedavg` preset, `deadbeef` and commit 1234567 are fine.\n")
    assert _violations(good, tmp_path) == []
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("- at commit `a1b2c3d`\n")
    assert _violations(changelog, tmp_path) == []
