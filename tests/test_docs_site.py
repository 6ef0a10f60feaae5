"""The documentation site and the README: the mkdocs hook (docs_build/hooks.py) brings the README
and the labs' pages into the site and rewrites their links, a broken link fails `mkdocs build
--strict`, the README stays short and keeps the two commands and every subcommand, and the
README's picture is made from a run's folder (benchmarks/readme_figure.py)."""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from topolab.cli import COMMANDS

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200
"""Issue 49: a README a newcomer reads in five minutes."""


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the [docs] extra (scripts/setup.sh installs it)")
    return _load(REPO / "docs_build" / "hooks.py", "docs_site_hooks")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository in miniature: README, docs/ with an image folder, labs/ with an exercise,
    a scenario and a benchmark plot outside the site."""
    for path in [
        "README.md",
        "docs/ci.md",
        "docs/results.md",
        "docs/images/run.png",
        "labs/README.md",
        "labs/01-ring/README.md",
        "labs/01-ring/starter/notes.md",
        "scenarios/topoopt-12.toml",
        "benchmarks/results/plot.png",
    ]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("# x\n")
    return tmp_path


def test_site_path_maps_the_readme_docs_and_labs_pages(hooks: ModuleType) -> None:
    assert hooks.site_path("README.md") == "index.md"
    assert hooks.site_path("docs/ci.md") == "ci.md"
    assert hooks.site_path("docs/images/run.png") == "images/run.png"
    assert hooks.site_path("labs/01-ring/README.md") == "labs/01-ring/README.md"
    assert hooks.site_path("labs/01-ring/starter/notes.md") is None  # the student's code folder
    assert hooks.site_path("labs/01-ring/check.py") is None
    assert hooks.site_path("scenarios/topoopt-12.toml") is None


def test_links_from_the_readme_point_at_the_site_pages(hooks: ModuleType, repo: Path) -> None:
    md = (
        "See [ci](docs/ci.md#jobs), [the labs](labs/), [exercise 1](labs/01-ring/README.md)\n"
        "and ![run](docs/images/run.png) or [the web](https://example.org/docs/ci.md).\n"
    )
    out = hooks.rewrite_links(md, "README.md", repo)
    assert out.problems == [] and out.images == []
    assert out.markdown == (
        "See [ci](ci.md#jobs), [the labs](labs/README.md), [exercise 1](labs/01-ring/README.md)\n"
        "and ![run](images/run.png) or [the web](https://example.org/docs/ci.md).\n"
    )


def test_links_from_a_lab_and_a_docs_page_resolve_from_their_folders(hooks: ModuleType, repo: Path) -> None:
    lab = hooks.rewrite_links(
        "[table](../../docs/results.md#compare) [home](../../README.md)", "labs/01-ring/README.md", repo
    )
    assert lab.markdown == "[table](../../results.md#compare) [home](../../index.md)"
    doc = hooks.rewrite_links("[ex](../labs/01-ring/README.md) [ci](ci.md)", "docs/results.md", repo)
    assert doc.markdown == "[ex](labs/01-ring/README.md) [ci](ci.md)"


def test_an_image_outside_docs_is_copied_and_a_code_file_becomes_its_path(hooks: ModuleType, repo: Path) -> None:
    md = "![plot](../benchmarks/results/plot.png) [the scenario](../scenarios/topoopt-12.toml) [`scenarios/topoopt-12.toml`](../scenarios/topoopt-12.toml)"
    out = hooks.rewrite_links(md, "docs/results.md", repo)
    assert out.images == ["benchmarks/results/plot.png"]
    assert out.markdown == (
        "![plot](repo/benchmarks/results/plot.png) the scenario (`scenarios/topoopt-12.toml`) `scenarios/topoopt-12.toml`"
    )


def test_a_link_to_nothing_is_a_problem_and_links_in_code_are_left_alone(hooks: ModuleType, repo: Path) -> None:
    md = "[gone](docs/gone.md) [out](../elsewhere.md)\n`[code](docs/gone2.md)`\n```\n[fenced](docs/gone3.md)\n```\n"
    out = hooks.rewrite_links(md, "README.md", repo)
    assert out.markdown == md
    assert out.problems == [
        "README.md: link to 'docs/gone.md', which is not in the repository",
        "README.md: link to '../elsewhere.md', which is not in the repository",
    ]


def _site(root: Path, readme_link: str) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of a small site using the real hook, its README linking to
    ``readme_link``."""
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "guide.md").write_text("# Guide\n\n## Set-up\n\nBack to [the README](../README.md).\n")
    (root / "labs").mkdir(exist_ok=True)
    (root / "labs" / "README.md").write_text("# Labs\n\nSee the [guide](../docs/guide.md#set-up).\n")
    (root / "README.md").write_text(f"# Home\n\nRead [this]({readme_link}).\n")
    (root / "mkdocs.yml").write_text(
        "site_name: t\ndocs_dir: docs\ntheme: mkdocs\n"
        f"hooks:\n  - {REPO / 'docs_build' / 'hooks.py'}\n"
        "validation:\n  links:\n    not_found: warn\n    anchors: warn\n"
    )
    mkdocs = Path(sys.executable).with_name("mkdocs")
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(root / "site")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_broken_link_fails_the_strict_build(hooks: ModuleType, tmp_path: Path) -> None:
    good = _site(tmp_path, "docs/guide.md#set-up")
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "site" / "labs" / "index.html").is_file()  # the labs' README joined the site
    bad = _site(tmp_path, "docs/guid.md")
    assert bad.returncode != 0
    assert "README.md: link to 'docs/guid.md', which is not in the repository" in bad.stderr
    bad_anchor = _site(tmp_path, "docs/guide.md#setup")
    assert bad_anchor.returncode != 0 and "#setup" in bad_anchor.stderr


def test_the_readme_is_short_keeps_the_two_commands_and_names_every_command() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    lines = readme.splitlines()
    assert any(line.startswith("bash scripts/run.sh ") for line in lines)
    assert any(line.startswith("bash scripts/test.sh ") for line in lines)  # .ci/run runs it
    table = readme.split("## Commands", 1)[1].split("\n## ", 1)[0]
    reference = (REPO / "docs" / "commands.md").read_text()
    for name in COMMANDS:
        assert re.search(rf"`topolab {re.escape(name)}\b", table), f"README's command table lacks {name}"
        assert re.search(rf"`topolab {re.escape(name)}\b", reference), f"docs/commands.md lacks {name}"


def test_the_readme_figure_puts_the_two_plots_side_by_side(tmp_path: Path) -> None:
    figure = _load(REPO / "benchmarks" / "readme_figure.py", "readme_figure")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, width in zip(figure.PLOTS, (300, 500)):
        plt.imsave(tmp_path / name, [[0.0] * width] * 200)
    png = figure.combine(tmp_path)
    height, width = plt.imread(io.BytesIO(png)).shape[:2]
    assert png.startswith(b"\x89PNG") and width / height == pytest.approx(800 / 200, rel=0.05)
    (tmp_path / figure.PLOTS[1]).unlink()
    with pytest.raises(figure.UsageError, match="no iterations.png"):
        figure.combine(tmp_path)
