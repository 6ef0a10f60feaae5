"""The README's picture: a run's plan (topology.png) beside its predicted vs measured iterations
(iterations.png), as one image, and the caption that says where it came from.

Reads a results folder of `topolab run` (its results.json and the two plots the report drew);
writes the picture (default docs/images/topoopt-12-run.png) and prints the caption: the command,
the date the run started and the commit it ran at, the measured and predicted iteration.

    sudo .venv/bin/topolab run scenarios/topoopt-12.toml --run-dir /tmp/docs-run --out /tmp/docs-out
    .venv/bin/python benchmarks/readme_figure.py /tmp/docs-out
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract.errors import UsageError
from contract.files import write_file
from topolab.results.journal import read_results
from topolab.results.run_results import RunResults

PLOTS = ("topology.png", "iterations.png")
"""The report's plots shown side by side: the plan's cables, then each iteration measured vs predicted."""
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "topoopt-12-run.png"
HEIGHT_IN = 4.8
"""Height of the picture (inches); each plot keeps its aspect ratio."""


def caption(results: RunResults, command: str) -> str:
    """One line under the picture: what made it, when and at which commit, and what it shows."""
    summary = results.summarize()
    predicted = results.predicted.real_ms if results.predicted else None
    shows = f"measured {summary.median_real_ms:.3f} ms per iteration"
    if predicted is not None and summary.error is not None:
        shows += f", predicted {predicted:.3f} ms ({summary.error:.1%})"
    verified = "every iteration verified" if summary.verified else "not every iteration verified"
    return (
        f"`{command}`, {results.started[:10]} at {results.environment.commit}: "
        f"{summary.iterations} timed iterations, {verified}; {shows}."
    )


def combine(folder: Path) -> bytes:
    """The two plots of ``folder`` side by side, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = []
    for name in PLOTS:
        if not (folder / name).is_file():
            raise UsageError(f"{folder}: no {name} in it (the report of topolab run draws it)")
        images.append(plt.imread(folder / name))
    widths = [img.shape[1] / img.shape[0] for img in images]
    fig, axes = plt.subplots(
        1, len(images), figsize=(HEIGHT_IN * sum(widths), HEIGHT_IN), gridspec_kw={"width_ratios": widths}
    )
    for ax, img in zip(axes, images):
        ax.imshow(img)
        ax.axis("off")
    fig.subplots_adjust(left=0, right=1, top=1, bottom=0, wspace=0.02)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a results folder of topolab run")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the picture (default: {DEFAULT_OUT})")
    ap.add_argument(
        "--command",
        default="sudo .venv/bin/topolab run scenarios/topoopt-12.toml",
        help="the command the caption names (default: the README's run)",
    )
    args = ap.parse_args()
    try:
        results = read_results(args.folder)
        write_file(args.out, combine(args.folder))
    except UsageError as err:
        print(f"readme_figure: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    print(caption(results, args.command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
