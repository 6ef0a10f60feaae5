"""The inputs of `topolab sweep`, each checked before the first search: comma-separated
lists with their bounds, the models (zoo names, operator-graph files, Chakra traces and
PyTorch factories, each read once), a JSON price table (every price finite and > 0), and
every cell's scenario; a bad one is a `UsageError` naming the flag.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from contract.errors import UsageError
from contract.files import FileInputError, read_capped_text
from planner import ScenarioError
from planner.cost.costmodel.baselines import network_scenario
from planner.cost.costmodel.price import PriceModel
from planner.model.zoo import MODELS
from planner.scenario import Scenario, with_overrides

# A cell's scenario key -> the flag that set it, so a bad cell names the flag.
_FLAG_OF_KEY = {
    "cluster.degree": "--degrees",
    "cluster.link_gbps": "--link-gbps",
    "workload.model": "--models",
    "workload.graph": "--models",
    "workload.chakra": "--models",
}
GRAPH_SUFFIXES = (".json", ".json.gz")  # `topolab import --out` writes these; another file is a Chakra trace
TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def split_list(text: str | None, option: str, cast, choices=None, bounds=None) -> list | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{option}: empty list")
    out = []
    for item in items:
        if choices is not None and item not in choices:
            raise UsageError(f"{option}: {item!r} is not one of {', '.join(choices)}")
        try:
            value = cast(item)
        except ValueError:
            raise UsageError(f"{option}: {item!r} is not {TYPE_WORDS.get(cast, cast.__name__)}") from None
        if bounds is not None:
            low, high = bounds
            if not (math.isfinite(value) and low <= value <= high):
                raise UsageError(f"{option}: {item!r} must be between {low:g} and {high:g}")
        out.append(value)
    return out


def model_source(item: str) -> dict[str, str]:
    """The ``[workload]`` key naming the model ``item`` of ``--models``: a zoo name, an
    operator-graph file (``.json``, ``.json.gz``), a Chakra trace (another file, or a folder)
    or a PyTorch factory (``file.py:factory``, ``package.module:factory``). A path is relative
    to the current folder, as every command-line path is (made absolute here, since the
    scenario's own paths are relative to its folder)."""
    if item in MODELS:
        return {"model": item}
    path = Path(item)
    if not path.exists() and ":" in item:
        target, _, factory = item.rpartition(":")
        return {"model": f"{Path(target).resolve()}:{factory}" if target.endswith(".py") else item}
    if not path.exists():
        raise UsageError(
            f"--models: {item!r} is not one of {', '.join(MODELS)}, nor an existing graph file or Chakra trace, "
            "nor 'file.py:factory'"
        )
    key = "graph" if path.is_file() and item.endswith(GRAPH_SUFFIXES) else "chakra"
    return {key: str(path.resolve())}


def model_list(text: str | None, base: Scenario) -> dict[str, Scenario | None]:
    """``--models``: label -> the base scenario with that model, read once (None: a zoo
    model, set per cell). Default: the scenario's own; ``all``: the zoo."""
    if text is None:
        return {base.workload.model: None}
    if text.strip() == "all":
        return dict.fromkeys(MODELS)
    out: dict[str, Scenario | None] = {}
    for item in split_list(text, "--models", str) or []:
        source = model_source(item)
        if "model" in source and source["model"] in MODELS:
            out[item] = None
            continue
        try:
            out[item] = with_overrides(base, drop=(("workload", "model"),), workload=source)
        except ScenarioError as err:
            raise UsageError(f"--models {item}: {err.problem}") from None
    return out


def _positive_number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"{where}: expected a finite number > 0, got {json.dumps(value)}")
    return float(value)


MAX_PRICES_BYTES = 1 << 20  # a price table is a few hundred bytes


def load_prices(path: str) -> PriceModel:
    """A JSON price table (docs/search.md); every price finite and > 0, else one line naming it."""
    where = f"--prices {path}"
    try:
        doc = json.loads(read_capped_text(path, MAX_PRICES_BYTES, "price table"))
    except FileInputError as err:
        raise UsageError(f"--prices {err}") from None
    except (ValueError, RecursionError) as err:
        raise UsageError(f"{where}: not JSON: {err}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object of prices")
    for key, value in doc.items():
        if isinstance(value, dict):
            if not value:
                raise UsageError(f"{where}: {key}: empty table")
            for speed, price in value.items():
                try:
                    _positive_number(float(speed), f"{where}: {key}")
                except ValueError:
                    raise UsageError(f"{where}: {key}: speed {speed!r} is not a number") from None
                _positive_number(price, f"{where}: {key}.{speed}")
        else:
            _positive_number(value, f"{where}: {key}")
    try:
        return PriceModel.from_dict(doc)
    except (ValueError, TypeError) as err:
        raise UsageError(f"{where}: {err}") from None


def cell_scenarios(
    base: Scenario, cells, prices: PriceModel, models: dict[str, Scenario | None] | None = None
) -> tuple[list, list[str]]:
    """Every possible cell's network scenario, all validated before the first search starts,
    and a note for each impossible cell (a torus whose degree does not fit the server count,
    say), which the sweep skips. `UsageError` naming the flag when no cell is possible.
    ``models``: `model_list`'s scenarios of the models read from files."""
    kept, skipped, first_error = [], [], None
    for model, d, b, net in cells:
        try:
            own = (models or {}).get(model)
            # the scenario's own model and a model read from a file: kept as loaded
            job = {} if own is not None or model == base.workload.model else {"model": model}
            scenario = with_overrides(own or base, workload=job, cluster={"degree": d, "link_gbps": b})
            kept.append(((model, d, b, net), network_scenario(scenario, net, prices)))
        except ScenarioError as err:
            flag = _FLAG_OF_KEY.get(err.key, err.key)
            first_error = first_error or f"{flag}: {model} d={d} B={b:g} {net}: {err.problem}"
            skipped.append(f"skipped {model} d={d} B={b:g} {net}: {err.problem}")
    if not kept:
        raise UsageError(f"no possible cell ({len(cells)} tried); the first: {first_error}")
    return kept, skipped
