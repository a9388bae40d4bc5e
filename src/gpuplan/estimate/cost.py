"""What a plan costs in money: cloud rent, ownership (capex + power - residual), $ per run,
$ per million tokens and the rent-vs-buy break-even (docs/recommend.md §4).

Rent. Providers sell whole instances: N GPUs need ceil(N / g) instances of g GPUs and every GPU
of every instance is billed (3 GPUs of an 8-GPU instance cost the whole instance). A job spread over
several instances uses the provider's largest shape for that GPU (the one with the node's
interconnect), never a pile of 1-GPU boxes. The cheapest matching offering wins unless the
scenario names providers or its own price (`cost.usd_per_gpu_hour`).

Own. Per GPU and hour of the hardware's life:
    capex      = (launch price or cost.capex_usd_per_gpu) x (1 + server_overhead_fraction)
    amortised  = capex x (1 - residual_fraction) / (years x 8766 h)
    power      = TDP x utilization x PUE / 1000 x electricity_usd_per_kwh
    own $/h    = amortised + power
Break-even (months of continuous use) = capex of the GPUs / (rent per month - power per month),
with a month of 730.5 h; None when renting is cheaper than the electricity alone.

All inputs come from the scenario's `cost:` block; every number's basis (provider, instance,
retrieval date, price source) is in `details`. Keys that do not apply are None.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from .results import CostEstimate, PerformanceEstimate

HOURS_PER_YEAR = 8766.0          # 365.25 d
HOURS_PER_MONTH = HOURS_PER_YEAR / 12


@dataclass(frozen=True)
class RentQuote:
    """The price of `gpus_requested` GPUs rented as whole instances of one offering."""
    provider: str
    instance_type: str
    gpus_per_instance: int
    instances: int
    gpus_requested: int
    usd_per_instance_hour: float
    price_kind: str                  # on-demand | spot | user
    includes_host: bool
    source_url: str
    retrieved: str
    region: str = ""

    @property
    def gpus_billed(self) -> int:
        return self.instances * self.gpus_per_instance

    @property
    def usd_per_hour(self) -> float:
        return self.instances * self.usd_per_instance_hour

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "instance_type": self.instance_type,
                "gpus_per_instance": self.gpus_per_instance, "instances": self.instances,
                "gpus_requested": self.gpus_requested, "gpus_billed": self.gpus_billed,
                "usd_per_instance_hour": self.usd_per_instance_hour, "usd_per_hour": self.usd_per_hour,
                "price_kind": self.price_kind, "includes_host": self.includes_host, "region": self.region,
                "source_url": self.source_url, "retrieved": self.retrieved}


def _offerings(gpu_id: str, providers: tuple[str, ...] | None) -> tuple:
    from ..hardware import offerings
    return tuple(offerings(gpu_id, providers=list(providers) if providers else None))


@functools.lru_cache(maxsize=65536)
def rent_quotes(gpu_id: str, count: int, providers: tuple[str, ...] | None = None, spot: bool = False,
                limit: int = 3) -> tuple[RentQuote, ...]:
    """The `limit` cheapest ways to rent `count` GPUs (whole instances), cheapest first.

    Spot prices are used where the offering has one when `spot` is set; offerings without a spot
    price then count at their on-demand price. A job larger than one instance only uses the largest
    instance shape on offer for this GPU (multi-node training needs the node interconnect).
    """
    rows = _offerings(gpu_id, providers)
    if not rows:
        return ()
    biggest = max(o.gpus_per_instance for o in rows)
    quotes = []
    for o in rows:
        if count > o.gpus_per_instance and o.gpus_per_instance < biggest:
            continue
        if spot and o.usd_per_hour_spot is not None:
            price, kind = o.usd_per_hour_spot, "spot"
        elif o.usd_per_hour_on_demand is not None:
            price, kind = o.usd_per_hour_on_demand, "on-demand"
        else:
            continue
        quotes.append(RentQuote(o.provider, o.instance_type, o.gpus_per_instance,
                                math.ceil(count / o.gpus_per_instance), count, float(price), kind,
                                o.includes_host, o.source_url, o.retrieved, getattr(o, "region", "")))
    quotes.sort(key=lambda q: (q.usd_per_hour, q.gpus_billed, q.provider, q.instance_type))
    return tuple(quotes[:limit])


@dataclass(frozen=True)
class OwnQuote:
    capex_usd_per_gpu: float          # GPU + server share
    capex_basis: str
    amortized_usd_per_gpu_hour: float
    power_kw_per_gpu: float | None
    power_usd_per_gpu_hour: float | None

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.amortized_usd_per_gpu_hour + (self.power_usd_per_gpu_hour or 0.0)


def own_quote(gpu: Any, cost: Any) -> OwnQuote | None:
    """Hourly cost of owning one GPU (None when neither a capex nor a launch price is known)."""
    if cost.capex_usd_per_gpu is not None:
        gpu_price, basis = float(cost.capex_usd_per_gpu), "cost.capex_usd_per_gpu (yours)"
    elif getattr(gpu, "launch_price_usd", None):
        gpu_price = float(gpu.launch_price_usd)
        basis = f"launch price of {gpu.id}" + (f" ({gpu.launch_price_basis})" if getattr(gpu, "launch_price_basis", "") else "")
    else:
        return None
    capex = gpu_price * (1.0 + cost.server_overhead_fraction)
    amort = capex * (1.0 - cost.residual_fraction) / (cost.years * HOURS_PER_YEAR)
    tdp = getattr(gpu, "tdp_w", None)
    if tdp:
        kw = tdp * cost.utilization * cost.pue / 1000.0
        power = kw * cost.electricity_usd_per_kwh
    else:
        kw = power = None
    return OwnQuote(capex, basis + f" + {cost.server_overhead_fraction:.0%} server share", amort, kw, power)


def _breakeven_months(rent_usd_per_hour: float | None, own: OwnQuote | None, count: int) -> float | None:
    if rent_usd_per_hour is None or own is None:
        return None
    monthly_saving = (rent_usd_per_hour - count * (own.power_usd_per_gpu_hour or 0.0)) * HOURS_PER_MONTH
    if monthly_saving <= 0:
        return None
    return count * own.capex_usd_per_gpu / monthly_saving


def _tokens_per_s(scn: Any, perf: PerformanceEstimate) -> tuple[float | None, str]:
    if scn.task in ("train", "finetune"):
        if perf.tokens_per_s_per_gpu:
            return perf.tokens_per_s_per_gpu * scn.hardware.count, "trained tokens"
        return None, "trained tokens"
    return perf.output_tokens_per_s or None, "generated (output) tokens"


def estimate_cost(scn: Any, gpu: Any, perf: PerformanceEstimate | None, *, quote: RentQuote | None = None) -> CostEstimate:
    """Rent and ownership cost of the scenario's hardware; the headline follows `cost.basis`
    (auto: rent when a price is known, else own). `quote` lets the search pass a cached quote."""
    c = scn.cost
    n = scn.hardware.count
    basis_mode = getattr(c, "basis", "auto")
    details: dict[str, Any] = {"gpus": n, "gpu": gpu.id}

    # ---- rent
    rent: RentQuote | None = quote
    alternatives: list[dict[str, Any]] = []
    rent_note = ""
    if rent is None and c.usd_per_gpu_hour is not None:
        rent = RentQuote("user", "cost.usd_per_gpu_hour", 1, n, n, float(c.usd_per_gpu_hour), "user", True, "", "")
    elif rent is None:
        providers = tuple(p.strip().lower() for p in c.providers) if c.providers else None
        quotes = rent_quotes(gpu.id, n, providers, bool(c.spot))
        if quotes:
            rent = quotes[0]
            alternatives = [q.to_dict() for q in quotes[1:]]
        else:
            rent_note = (f"no offering of {gpu.id}" + (f" at {', '.join(providers)}" if providers else "")
                         + " in the price catalog; set cost.usd_per_gpu_hour to price it")
    own = own_quote(gpu, c)

    rent_usd_h = rent.usd_per_hour if rent else None
    own_usd_h = n * own.usd_per_gpu_hour if own else None
    if basis_mode == "rent" or (basis_mode == "auto" and rent is not None):
        usd_h, headline = rent_usd_h, "rent"
    elif own is not None and basis_mode in ("own", "auto"):
        usd_h, headline = own_usd_h, "own"
    else:
        usd_h, headline = None, basis_mode

    if rent is not None:
        details["rent"] = rent.to_dict()
        if rent.gpus_billed > n:
            details["rent"]["note"] = (f"{n} GPUs need {rent.instances} x {rent.gpus_per_instance}-GPU instance(s): "
                                       f"{rent.gpus_billed} GPUs are billed")
        if not rent.includes_host:
            details["rent"]["note"] = (details["rent"].get("note", "") + "; " if details["rent"].get("note") else "") \
                + "GPU-only price: the host VM is extra"
        if c.spot and rent.price_kind != "spot":
            details["rent"]["spot_note"] = "no spot price listed for this offering; on-demand price used"
        details["rent_alternatives"] = alternatives
    elif rent_note:
        details["rent"] = None
        details["rent_note"] = rent_note
    if own is not None:
        details["own"] = {"capex_usd_per_gpu": own.capex_usd_per_gpu, "capex_basis": own.capex_basis,
                          "capex_usd_total": own.capex_usd_per_gpu * n, "years": c.years,
                          "residual_fraction": c.residual_fraction,
                          "amortized_usd_per_gpu_hour": own.amortized_usd_per_gpu_hour,
                          "power_kw_per_gpu": own.power_kw_per_gpu,
                          "power_usd_per_gpu_hour": own.power_usd_per_gpu_hour,
                          "electricity_usd_per_kwh": c.electricity_usd_per_kwh, "pue": c.pue,
                          "utilization": c.utilization, "usd_per_hour": own_usd_h,
                          "power_basis": f"TDP {gpu.tdp_w} W x utilization x PUE" if own.power_kw_per_gpu else
                          "no TDP in the catalog: power not counted"}
    else:
        details["own"] = None
    details["breakeven_months"] = _breakeven_months(rent_usd_h, own, n)

    # ---- per run and per token
    tps, token_kind = _tokens_per_s(scn, perf) if perf is not None else (None, "")
    usd_total = None
    run_s = perf.time_to_train_s if perf is not None else None
    if usd_h is not None and run_s:
        usd_total = usd_h * run_s / 3600.0
        details["run_hours"] = run_s / 3600.0
    usd_per_m = usd_h / (tps * 3600.0) * 1e6 if (usd_h is not None and tps) else None
    if usd_per_m is not None:
        details["usd_per_million_tokens_of"] = token_kind
    if rent_usd_h is not None and tps:
        details["rent_usd_per_million_tokens"] = rent_usd_h / (tps * 3600.0) * 1e6
    if own_usd_h is not None and tps:
        details["own_usd_per_million_tokens"] = own_usd_h / (tps * 3600.0) * 1e6
    if rent_usd_h is not None and run_s:
        details["rent_usd_total"] = rent_usd_h * run_s / 3600.0
    if own_usd_h is not None and run_s:
        details["own_usd_total"] = own_usd_h * run_s / 3600.0
    details["headline"] = headline

    if headline == "rent" and rent is not None:
        if rent.price_kind == "user":
            basis = f"rent at your price ${rent.usd_per_instance_hour:g}/GPU-h x {n} GPUs"
        else:
            basis = (f"{rent.price_kind}, {rent.provider} {rent.instance_type} x{rent.instances} "
                     f"({rent.gpus_billed} GPUs billed), price retrieved {rent.retrieved}")
    elif headline == "own" and own is not None:
        basis = (f"own {n} x {gpu.id}: capex {own.capex_basis} over {c.years:g} y, "
                 f"{c.residual_fraction:.0%} residual, power at {c.electricity_usd_per_kwh:g} $/kWh, PUE {c.pue:g}")
    else:
        basis = rent_note or f"no price for {gpu.id}: give cost.usd_per_gpu_hour or cost.capex_usd_per_gpu"
    return CostEstimate(usd_per_hour=usd_h, usd_total=usd_total, usd_per_million_tokens=usd_per_m,
                        basis=basis, details=details)
