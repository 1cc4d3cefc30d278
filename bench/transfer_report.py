"""bench/transfer_report.py OUT[,OUT...] "MODELS" "CLUSTERS" "SEEDS" — the table and plot of bench_transfer.sh.

Reads OUT/run_<model>_<cluster>_<seed>_<fresh|trained>.json (tapp-cli optimize --json) and prints,
per case, the best classical planner (HOGWILD left out), the evaluations each start needed to come
within 2% of it, the zero-shot gap ("failed" where its plan did not run) and the final gaps; then
the medians, per case (median over seeds) how many need at least 5x fewer / fewer / as many / more
evaluations when pre-trained, the same counted on each policy's own search only (the evaluations
before its first restart began imitating the best classical plan, `policy.evaluations_before_imitation`;
runs without that key leave the line out), the zero-shot plans within 10% of all runs, README's
table (markdown: per model, each cluster's medians), and writes OUT/transfer.svg. Several OUTs (one per training seed, comma-separated) pool their runs: each
case's medians are then over every policy's runs (issue 17 asks for the median over seeds), with
the zero-shot gap's per-case median too; the plot goes to the first OUT.
A case whose two starts saw other costs (their best classical plans differ) is left out, named.
"""
import json
import math
import os
import statistics
import sys

outs, models, clusters = sys.argv[1].split(","), sys.argv[2].split(), sys.argv[3].split()
out = outs[0]
# Each run: (its folder, its seed), printed as the seed, or folder:seed where there are several.
seeds = [(o, s) for o in outs for s in sys.argv[4].split()]


def load(m, c, run, start):
    o, s = run
    path = os.path.join(o, f"run_{m}_{c}_{s}_{start}.json")
    return json.load(open(path)) if os.path.exists(path) else None


def best_classical(r):
    steps = [b["step_ms"] for b in r["baselines"] if b.get("ok") and b["name"] != "hogwild" and b.get("step_ms")]
    return min(steps) if steps else None


def evals_within(trace, target, limit=math.inf):
    """The evaluations when the best first came within target (None: never, or not by `limit`)."""
    for t in trace:
        if t["evaluations"] > limit:
            return None
        if t["best_step_ms"] <= target:
            return t["evaluations"]
    return None


def own_evals(r, target):
    """Evaluations to target on the policy's own search, before it imitated the best classical plan
    (inf: never); None for an older run that did not record where that was."""
    p = r["policy"]
    if "evaluations_before_imitation" not in p:
        return None
    e = evals_within(p["trace"], target, p["evaluations_before_imitation"] or math.inf)  # null: never imitated
    return e if e else math.inf


def per_case_line(cases):
    """Per case, the medians over seeds ("never" = inf): at least 5x fewer counts a case the
    fresh policy never reached and the trained one did. The cases where the fresh start took
    fewer than five evaluations are named apart: a start needs at least one, so none can show
    5x fewer there."""
    five = sum(math.isfinite(t) and f >= 5 * t for _, _, f, t in cases)
    cannot = sum(f < 5 for _, _, f, t in cases)
    fewer = sum(t < f for _, _, f, t in cases)
    more = sum(t > f for _, _, f, t in cases)
    return (f"trained at least 5x fewer evaluations in {five}/{len(cases)} ({five}/{len(cases) - cannot} "
            f"where the fresh start took five or more; {cannot} where it took fewer, so that no start can), "
            f"fewer in {fewer}, as many in {len(cases) - fewer - more}, more in {more}")


def curve(trace, ref, grid):
    """best-so-far / ref at each evaluation count of the grid (None before the first)."""
    ys, k, best = [], 0, None
    for g in grid:
        while k < len(trace) and trace[k]["evaluations"] <= g:
            best = trace[k]["best_step_ms"]
            k += 1
        ys.append(best / ref if best else None)
    return ys


def pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


grid = [int(round(10 ** (i / 20))) for i in range(0, 20 * 4 + 1)]  # 1 .. 10,000 evaluations
curves = {"fresh": [], "trained": []}
zero_shots, fresh_evals, trained_evals = [], [], []
zero_shot_failed = 0
mismatched = 0  # cases whose two starts saw other costs: left out
per_case = []  # (model, cluster, median fresh evaluations, median trained), inf = never
zero_shot_per_case = []  # per case, the median zero-shot gap over its runs (a failed plan: inf)
own = {"fresh": [], "trained": []}  # the same before imitating the classical plan (None: not recorded)
own_per_case = []  # (model, cluster, median fresh, median trained) on the policies' own search
print(f"{'model':16} {'cluster':30} {'seed':>4} {'classical ms':>13} {'fresh evals':>12} {'trained evals':>14}"
      f" {'zero-shot':>10} {'fresh final':>12} {'trained final':>14}")
for m in models:
    for c in clusters:
        case_fresh, case_trained, case_zero_shot, case_own = [], [], [], {"fresh": [], "trained": []}
        for run in seeds:
            s = run[1] if len(outs) == 1 else f"{outs.index(run[0]) + 1}:{run[1]}"
            fr, tr = load(m, c, run, "fresh"), load(m, c, run, "trained")
            if not fr or not tr:
                continue
            ref = best_classical(fr)
            if not ref:
                continue
            # Both starts must have had the same costs: their baselines (deterministic for a
            # seed) agree unless, say, a host's profile cache was filled between the two runs.
            ref_trained = best_classical(tr)
            if not ref_trained or abs(ref / ref_trained - 1) >= 1e-9:
                mismatched += 1
                print(f"skipped {m} {c} seed {s}: the fresh and trained runs saw other costs (best classical "
                      f"{ref:.1f} against {ref_trained or 0:.1f} ms; costs "
                      f"{fr.get('profile', {}).get('origin')} / {tr.get('profile', {}).get('origin')})")
                continue
            ef = evals_within(fr["policy"]["trace"], 1.02 * ref)
            et = evals_within(tr["policy"]["trace"], 1.02 * ref)
            zs = tr["policy"].get("zero_shot_step_ms")
            zgap = zs / ref - 1 if zs else None
            fgap = fr["step_ms"] / ref - 1
            tgap = tr["step_ms"] / ref - 1
            for start, r in (("fresh", fr), ("trained", tr)):
                own[start].append(own_evals(r, 1.02 * ref))
                case_own[start].append(own[start][-1])
            fresh_evals.append(ef if ef else math.inf)
            trained_evals.append(et if et else math.inf)
            case_fresh.append(fresh_evals[-1])
            case_trained.append(trained_evals[-1])
            case_zero_shot.append(zgap if zgap is not None else math.inf)
            if zgap is not None:
                zero_shots.append(zgap)
            else:
                zero_shot_failed += 1  # its plan failed (out of memory): not within 10%
            for start, r in (("fresh", fr), ("trained", tr)):
                curves[start].append(curve(r["policy"]["trace"], ref, grid))
            print(f"{m:16} {c:30} {s:>4} {ref:13.1f} {ef if ef else '-':>12} {et if et else '-':>14}"
                  f" {pct(zgap) if zgap is not None else 'failed':>10} {pct(fgap):>12} {pct(tgap):>14}")
        if case_fresh:
            per_case.append((m, c, statistics.median(case_fresh), statistics.median(case_trained)))
            zero_shot_per_case.append(statistics.median(case_zero_shot))
            if None not in case_own["fresh"] + case_own["trained"]:
                own_per_case.append((m, c, statistics.median(case_own["fresh"]), statistics.median(case_own["trained"])))

n = len(fresh_evals)
if n == 0:
    sys.exit("no complete runs")
med = lambda v: statistics.median(v)
print(f"\n{n} cases x seeds" + (f" ({mismatched} left out: other costs)" if mismatched else ""))
print(f"evaluations to within 2% of the best classical planner, median: fresh {med(fresh_evals)}, "
      f"trained {med(trained_evals)}; reached: fresh {sum(math.isfinite(e) for e in fresh_evals)}/{n}, "
      f"trained {sum(math.isfinite(e) for e in trained_evals)}/{n}")
both = [(f, t) for f, t in zip(fresh_evals, trained_evals) if math.isfinite(f) and math.isfinite(t)]
if both:
    print(f"per case where both reached it: median ratio fresh/trained {med([f / t for f, t in both]):.2f}")
if per_case:
    print(f"per case (median over seeds): {per_case_line(per_case)}")
if all(e is not None for e in own["fresh"] + own["trained"]):
    f_own, t_own = own["fresh"], own["trained"]
    print(f"by the policy's own search (before imitating the best classical plan): reached fresh "
          f"{sum(math.isfinite(e) for e in f_own)}/{n}, trained {sum(math.isfinite(e) for e in t_own)}/{n}; "
          f"median fresh {med(f_own)}, trained {med(t_own)}")
    print(f"  per case (median over seeds): {per_case_line(own_per_case)}")
if zero_shots or zero_shot_failed:
    print(f"zero-shot plan against the best classical: within 10% in {sum(z <= 0.10 for z in zero_shots)}/{n}"
          f" (failed: {zero_shot_failed}); median {pct(med(zero_shots)) if zero_shots else '-'} over the "
          f"{len(zero_shots)} that ran")
    print(f"  per case (median over seeds): within 10% in {sum(z <= 0.10 for z in zero_shot_per_case)}/"
          f"{len(zero_shot_per_case)}")

# README's table: per model, each cluster's median over the runs (bold: at least 5x fewer
# evaluations, or a zero-shot plan within 10%; "-": no complete run on that cluster).
def evals_cell(v, bold):
    text = "never" if not math.isfinite(v) else f"{v:,.0f}" if v == int(v) else f"{v:,.1f}"
    return f"**{text}**" if bold else text


def zero_shot_cell(z):
    if not math.isfinite(z):
        return "failed"
    return f"**{pct(z)}**" if z <= 0.10 else pct(z)


def case_cells(key):
    """A case's fresh, pre-trained and zero-shot cells."""
    if key not in by_case:
        return "-", "-", "-"
    f, t, z = by_case[key]
    return evals_cell(f, False), evals_cell(t, math.isfinite(t) and f >= 5 * t), zero_shot_cell(z)


by_case = {(m, c): (f, t, z) for (m, c, f, t), z in zip(per_case, zero_shot_per_case)}
print(f"\n| held out, on {' / '.join(clusters)} | evaluations to within 2%, fresh | pre-trained | zero-shot plan |")
print("| --- | ---: | ---: | ---: |")
for m in models:
    if any((m, c) in by_case for c in clusters):
        columns = zip(*(case_cells((m, c)) for c in clusters))
        print(f"| {m} | " + " | ".join(" / ".join(column) for column in columns) + " |")

# The plot: median over cases of best-so-far / best classical, against evaluations (log scale).
W, H, L, R, T, B = 640, 360, 60, 20, 20, 50
lo, hi = 0.95, 2.0
x = lambda e: L + (W - L - R) * math.log10(e) / 4
y = lambda v: T + (H - T - B) * (1 - (min(max(v, lo), hi) - lo) / (hi - lo))
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>']
for v in (1.0, 1.25, 1.5, 1.75, 2.0):
    svg.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
               f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
for e in (1, 10, 100, 1000, 10000):
    svg.append(f'<line x1="{x(e):.1f}" x2="{x(e):.1f}" y1="{T}" y2="{H - B}" stroke="#ddd"/>'
               f'<text x="{x(e):.1f}" y="{H - B + 16}" text-anchor="middle">{e}</text>')
svg.append(f'<text x="{(W + L) / 2}" y="{H - 12}" text-anchor="middle">evaluations (log)</text>')
svg.append(f'<text x="14" y="{(H - B) / 2}" transform="rotate(-90 14 {(H - B) / 2})" text-anchor="middle">'
           'best so far / best classical (median)</text>')
for start, colour in (("fresh", "#d62728"), ("trained", "#1f77b4")):
    pts = []
    for i, g in enumerate(grid):
        vals = [cv[i] for cv in curves[start] if cv[i] is not None]
        if len(vals) * 2 > len(curves[start]):  # a median once most runs have a valid plan
            pts.append(f"{x(g):.1f},{y(med(vals)):.1f}")
    svg.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{" ".join(pts)}"/>')
svg.append(f'<text x="{W - R - 150}" y="{T + 16}" fill="#d62728">fresh policy</text>')
svg.append(f'<text x="{W - R - 150}" y="{T + 32}" fill="#1f77b4">pre-trained policy</text></svg>')
open(os.path.join(out, "transfer.svg"), "w").write("\n".join(svg))
