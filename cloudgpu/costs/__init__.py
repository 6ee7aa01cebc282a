"""What GPUs cost: owning them (TCO), renting them (catalog offers), and what was spent.

Public names are re-exported here; the modules hold the arithmetic. Nothing in this
package loads a catalog, opens the state store or prints: callers pass data in.
"""

from cloudgpu.costs.compare import BuyRentResult, OptionResult, analyse, verdict_text
from cloudgpu.costs.defaults import DEFAULTS, SOURCES_DATE, TcoInputs, resolve_inputs
from cloudgpu.costs.history import HistoryRow, history_rows
from cloudgpu.costs.rent import RentOption, rent_options
from cloudgpu.costs.spend import SpendSummary, parse_since, summarize
from cloudgpu.costs.tco import Hardware, OwnedCost, hardware_for, owned_cost

__all__ = [
    "DEFAULTS",
    "SOURCES_DATE",
    "BuyRentResult",
    "Hardware",
    "HistoryRow",
    "OptionResult",
    "OwnedCost",
    "RentOption",
    "SpendSummary",
    "TcoInputs",
    "analyse",
    "hardware_for",
    "history_rows",
    "owned_cost",
    "parse_since",
    "rent_options",
    "resolve_inputs",
    "summarize",
    "verdict_text",
]
