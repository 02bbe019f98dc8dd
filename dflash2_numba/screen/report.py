"""The screen's output: one table (variant x case, failures highlighted), JSON with every
figure, and a plot of error against context per variant."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import List


def _fmt(v, spec=".2e"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def _is_reference(row) -> bool:
    """Whether ``row``'s variant is its family's bitwise reference (no reference of its own):
    the table's "ref" is for those only (a row of another variant without a byte comparison,
    such as one never checked, shows none)."""
    from .. import _registry

    try:
        return _registry.variants(row.family)[row.variant].bitwise_reference is None
    except KeyError:            # (a name registered by no family: not a reference)
        return False


def table_rows(rows) -> List[List[str]]:
    out = []
    for r in rows:
        extra = getattr(r, "state_err", None)
        out.append([r.family, r.case, r.state, r.variant,
                    _fmt(r.rel_l2_fp32), _fmt(r.max_abs_fp32), _fmt(r.rel_l2_fp16),
                    _fmt(extra) if r.family == "gdn" else _fmt(r.max_abs_fp16),
                    _fmt(r.ratio_to_frozen, ".2f"),
                    "ref" if r.bitwise is None and r.status in ("ok", "FAIL") and _is_reference(r)
                    else _fmt(r.bitwise),
                    _fmt(r.guards), _fmt(r.route_ok), _fmt(r.time_ms, ".3f"), r.status])
    return out


HEADERS = ["family", "case", "state", "variant", "relL2 fp32", "maxabs fp32", "relL2 fp16",
           "maxabs fp16 / state relL2", "vs ref", "bitwise", "guards", "route", "ms", "status"]


def never_checked(rows, exempt=()) -> List[str]:
    """The variants of ``rows`` (one family's run) unsupported on every case, so that nothing
    about them was checked, in order of appearance; a run that selected such a variant must
    not pass. ``exempt``: names not to report, the run's bitwise references (added for the
    other variants' byte comparison; a reference no case supports already fails every variant
    compared with it)."""
    checked = {}
    for r in rows:
        checked[r.variant] = checked.get(r.variant, False) or r.status != "unsupported"
    return [name for name, ok in checked.items() if not ok and name not in exempt]


def print_table(rows, console=None) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich is a dependency
        for r in table_rows(rows):
            print(" | ".join(r))
        return
    console = console or Console(width=200)
    t = Table(title="dflash2-screen", show_lines=False)
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for r, cells in zip(rows, table_rows(rows)):
        style = None if r.status in ("ok", "unsupported") else "bold red"
        t.add_row(*cells, style=style)
    console.print(t)
    for r in rows:
        for p in r.problems:
            console.print(f"[red]{r.family}/{r.variant} {r.case} [{r.state}]: {p}[/red]"
                          if r.status != "unsupported" else
                          f"{r.family}/{r.variant} {r.case}: unsupported: {p}")


def write_json(rows, path: str, meta: dict) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "rows": [asdict(r) for r in rows]}, f, indent=1, default=str)


def write_plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fams = sorted({r.family for r in rows})
    fig, axes = plt.subplots(1, len(fams), figsize=(6 * len(fams), 4.2), squeeze=False)
    for ax, fam in zip(axes[0], fams):
        sel = [r for r in rows if r.family == fam and r.rel_l2_fp32 is not None and r.state == "live"]
        for v in sorted({r.variant for r in sel}):
            pts = sorted((r.context, r.rel_l2_fp32) for r in sel if r.variant == v and r.rel_l2_fp32 > 0)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=v, alpha=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("context / tokens")
        ax.set_ylabel("rel L2 vs FP64 oracle (FP32 output)")
        ax.set_title(fam)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_lines():
            ax.legend()
        else:                   # (every error exactly 0, or none measured: nothing to draw)
            ax.text(0.5, 0.5, "no nonzero error to plot", ha="center", va="center",
                    transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
