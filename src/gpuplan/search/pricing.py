"""Prices in the search: each candidate's cost block, the headline $/h of n GPUs as estimate_cost
computes it (cached per GPU and count), and the quick cost the ranking compares."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import Search


def cost_block(s: Search, gpu_id: str) -> dict[str, Any]:
    cost = dict(s.space.base.get("cost") or {})
    cons = s.cons
    if cons.providers:
        cost["providers"] = list(cons.providers)
    if cons.spot is not None:
        cost["spot"] = cons.spot
    if cons.owned and gpu_id in cons.owned:
        cost["basis"] = "own"
    elif "basis" not in cost:
        # GPUs you do not own are rented: ranking rent against amortised purchase prices would
        # compare different things (buying shows up as the break-even instead)
        cost["basis"] = s.preset.cost_basis if s.preset and s.preset.cost_basis else "rent"
    return cost


def hourly(s: Search, gpu: Any, count: int) -> float | None:
    """The headline $/h of `count` GPUs as estimate_cost will compute it (cached)."""
    key = (gpu.id, count)
    if key not in s.cache.price:
        s.cache.price[key] = _hourly(s, gpu, count)
    return s.cache.price[key]


def _hourly(s: Search, gpu: Any, count: int) -> float | None:
    from ..estimate.cost import own_quote, rent_quotes
    from ..scenario import Cost
    cost = Cost(**cost_block(s, gpu.id))
    if cost.usd_per_gpu_hour is not None and cost.basis != "own":
        return count * cost.usd_per_gpu_hour
    if cost.basis == "own":
        own = own_quote(gpu, cost)
        return count * own.usd_per_gpu_hour if own else None
    providers = tuple(p.strip().lower() for p in cost.providers) if cost.providers else None
    quotes = rent_quotes(gpu.id, count, providers, bool(cost.spot))
    if quotes:
        return quotes[0].usd_per_hour
    if cost.basis == "auto":
        own = own_quote(gpu, cost)
        return count * own.usd_per_gpu_hour if own else None
    return None


def has_price(s: Search, gpu: Any) -> bool:
    return hourly(s, gpu, 1) is not None or hourly(s, gpu, s.node_size(gpu)) is not None


def no_price_reason(s: Search, gpu: Any) -> str:
    prov = s.cons.providers or (s.space.base.get("cost") or {}).get("providers")
    where = f" at {', '.join(prov)}" if prov else ""
    return f"no rental offering of {gpu.id}{where} in the price catalog, so it cannot be priced"


def quick_cost(s: Search, gpu: Any, count: int, perf: Any):
    """The headline numbers of estimate_cost from the cached hourly price (the full CostEstimate with
    its basis and details is built for the plans that are shown)."""
    from ..estimate.results import CostEstimate
    price = hourly(s, gpu, count)
    tps = (perf.tokens_per_s_per_gpu or 0.0) * count
    total = price * perf.time_to_train_s / 3600.0 if (price is not None and perf.time_to_train_s) else None
    upm = price / (tps * 3600.0) * 1e6 if (price is not None and tps) else None
    return CostEstimate(usd_per_hour=price, usd_total=total, usd_per_million_tokens=upm, basis="(quick)")
