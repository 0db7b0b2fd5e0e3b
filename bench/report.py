"""Markdown tables and the plot of the recall benchmark (numbers come from `bench.recall.run`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.dataset import CATEGORIES


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return "\n".join([_row(head), _row(["---"] * len(head)), *(_row(r) for r in rows)])


def recall_markdown(results: dict, budgets: Sequence[int], header: str, png: str) -> str:
    """The `recall` section of RESULTS.md: provenance, overall table, per-category table, stores, notes."""
    variants = results["variants"]
    n_by_cat = {k: g["n"] for k, g in next(iter(variants.values()))["groups"].items()}
    out = [
        f"## Recall on LoCoMo (dev, 6 conversations, {results['n_questions']} questions)\n",
        header,
        f"- elapsed: {results['elapsed_s']} s (embedding cache: {results['embedder']['hits']} hits, "
        f"{results['embedder']['misses']} misses)\n",
    ]
    out.append(
        "Turn-evidence recall (fraction of a question's evidence turns held by the returned L1 chunks, "
        "items cut at the token budget), session recall and MRR (within the largest budget), overall:\n"
    )
    head = ["variant", *[f"recall@{b}" for b in budgets], *[f"sess@{b}" for b in budgets], "MRR"]
    rows = []
    for v in variants.values():
        g = v["groups"]["all"]
        rows.append(
            [
                v["label"],
                *[f"{_get(g['recall'], b):.3f}" for b in budgets],
                *[f"{_get(g['session_recall'], b):.3f}" for b in budgets],
                f"{g['mrr']:.3f}",
            ]
        )
    out.append(_table(head, rows))
    out.append(f"\n![recall vs budget]({png})\n")
    out.append("Turn recall per category, at " + " / ".join(str(b) for b in budgets) + " tokens:\n")
    cats = [k for k in n_by_cat if k != "all"]
    head = ["variant", *[f"{k} {CATEGORIES[int(k)]} (n={n_by_cat[k]})" for k in cats]]
    rows = []
    for v in variants.values():
        rows.append(
            [v["label"], *[" / ".join(f"{_get(v['groups'][k]['recall'], b):.2f}" for b in budgets) for k in cats]]
        )
    out.append(_table(head, rows))
    out.append("\nMRR per category:\n")
    rows = [[v["label"], *[f"{v['groups'][k]['mrr']:.3f}" for k in cats]] for v in variants.values()]
    out.append(_table(["variant", *[f"{k} {CATEGORIES[int(k)]}" for k in cats]], rows))
    out.append("\nStores (chunk size 200 everywhere; ingest time includes embedding cache misses):\n")
    rows = [
        [k, s["settings"] or "defaults", ", ".join(f"{a} {b}" for a, b in s["counts"].items()), s["ingest_s"]]
        for k, s in results["stores"].items()
    ]
    out.append(_table(["store", "settings", "counts", "ingest s"], rows))
    return "\n".join(out) + "\n"


def _get(d: dict, b: int) -> float:
    """A per-budget value whether the keys are ints (fresh) or strings (read back from JSON)."""
    return float(d[b] if b in d else d[str(b)])


def plot(results: dict, budgets: Sequence[int], path: Path) -> None:
    """Recall vs budget, one line per variant, to a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for v in results["variants"].values():
        g = v["groups"]["all"]
        style = "-" if v["label"].startswith("(") else ":"
        ax.plot(budgets, [_get(g["recall"], b) for b in budgets], style, marker="o", label=v["label"])
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(budgets), [str(b) for b in budgets])
    ax.set_xlabel("token budget (cl100k_base)")
    ax.set_ylabel("turn-evidence recall")
    ax.set_title(f"LoCoMo dev ({results['n_questions']} questions): recall vs budget")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
