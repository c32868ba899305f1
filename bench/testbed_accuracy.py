#!/usr/bin/env python3
"""The simulator's accuracy on the testbed: predicted against measured, per iteration and
per stage, over at least 40 plans, each trained for real through shaped links.

The plans differ in cluster shape (two, three and four pools; a pool of two devices, where
the planner chooses dp 2 or tp 2; a cluster whose plan puts the replicas of one stage on
two device types, a mixed stage), strategy (harp, homogeneous, uniform: other cuts; a
uniform plan under ZeRO-1), schedule (harp-1f1b, 1f1b, gpipe; zb-h1, a split backward,
on two clusters), the slow link's bandwidth (0.1 to 0.01 Gbit/s) and the model (8 blocks
of hidden 256, 4 of hidden 384). Each cluster is profiled once; every plan's prediction is
its simulated iteration from that profile alone (what `harp train` prints), never
calibrated on its own run, set beside the median step measured on the testbed. Plans
that two variants share (same cuts, dp, tp, ZeRO) are trained once.

Per stage: the plan's compute per microbatch (fwd_s + bwd_s, its fixed cost per call
included) against what the run measured (measured_plan.json).

The second column, calibrated: the same plan simulated with the stage times measured in
another run of it (under the next schedule; the links, all-reduces and optimizer steps
stay the plan's), as `harp plan --calibrate` would cost it. It separates the errors of the
profile from those of the simulator.

Writes OUT/testbed_accuracy.csv (per iteration), OUT/testbed_accuracy_stages.csv (per
stage), OUT/testbed_accuracy.svg (predicted against measured, the y = x line and a +-10%
band) and OUT/testbed_accuracy_hist.svg (histograms of the errors); prints the median and
the worst |error| of each column and the share of stages within 10%.

--loopback also trains every plan once more under harp-1f1b with its ranks on 127.0.0.1
(the same emulated devices, links not shaped) and writes its per-stage compute errors to
OUT/testbed_accuracy_loopback.csv: it separates what the profile misses from what the
shaped links' traffic costs the ranks' computes.

--compare-packet-us N also trains every plan once more under harp-1f1b on a testbed whose
packets take N us of their link's time (harp launch --testbed-packet-us; the default is
500), right after its default run, and writes both runs' iteration and per-stage errors
to OUT/testbed_accuracy_packets.csv: what the packet time does to the errors, side by
side (docs/testbed.md, "What the shaped links cost a compute").

--floor also trains, for each device type, a one-stage plan of the whole model on one
device (one rank on 127.0.0.1: no links, no other rank), twice in a row, and writes
OUT/testbed_accuracy_floor.csv: the profile's own error where nothing else runs beside
the compute, and how far two runs of one plan differ on this machine (its noise floor).

--reuse reads the runs a previous invocation left in OUT (profiles, plans, summaries)
instead of profiling and training again: the tables and charts are recomputed only (with
--loopback, the loopback runs not yet there are trained).

usage: bench/testbed_accuracy.py [--harp PATH] [--out DIR] [--steps N] [--only SETUP,...] [--loopback]
                                 [--compare-packet-us N] [--floor] [--reuse]
"""
import json
import os

import testbed_lib as tb

BASE = (("harp", "harp", []), ("homogeneous", "homogeneous", []), ("uniform", "uniform", []))
SCHEDULES = ["harp-1f1b", "1f1b", "gpipe"]
SPLIT = SCHEDULES + ["zb-h1"]
A, B, C = ("pool-a", "cpu-a", 1), ("pool-b", "cpu-b", 1), ("pool-c", "cpu-c", 1)

# (name, pools, links, model, microbatches, microbatch size, profile microbatch sizes,
#  variants (label, strategy, extra plan flags), schedules)
SETUPS = [
    ("three-fast", [A, B, C], [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.1)], "gpt-testbed", 16, 1, [1],
     BASE, SPLIT),
    ("three-slow", [A, B, C], [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.01)], "gpt-testbed", 16, 1, [1],
     BASE, SCHEDULES),
    ("two", [A, C], [("pool-a", "pool-c", 0.02)], "gpt-testbed", 16, 1, [1], BASE, SCHEDULES),
    ("two-dp", [("pool-b", "cpu-b", 2), C], [("pool-b", "pool-c", 0.05)], "gpt-testbed", 8, 2, [1, 2],
     BASE + (("uniform-zero1", "uniform", ["--zero", "1"]),), SCHEDULES),
    ("four", [A, B, C, ("pool-d", "cpu-c", 1)],
     [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.05), ("pool-c", "pool-d", 0.02)], "gpt-testbed", 16, 1, [1],
     BASE, SPLIT),
    ("wide-three", [A, B, C], [("pool-a", "pool-b", 0.1), ("pool-b", "pool-c", 0.02)], "gpt-testbed-wide", 16, 1,
     [1], BASE, SCHEDULES),
    ("mixed", [("pool-f", "cpu-a", 1), ("pool-s", "cpu-b", 2), ("pool-x", "cpu-c", 1)],
     [("pool-f", "pool-s", 10), ("pool-s", "pool-x", 0.1)], "gpt-testbed", 1, 8, list(range(1, 9)),
     (("harp-mixed", "harp", ["--mixed-stages", "true"]), ("harp", "harp", ["--mixed-stages", "false"])),
     SCHEDULES),
]


def error(predicted, measured):
    return (predicted - measured) / measured


def calibrated_s(harp, plan_file, measured_plan_file, schedule, summary):
    """The plan simulated under `schedule`, with the launch counts its run used (from its
    summary.json), and each stage's forward and backward time as measured in another run
    (measured_plan.json holds those; links, all-reduce and optimizer stay the plan's)."""
    p = json.load(open(plan_file))
    m = json.load(open(measured_plan_file))
    p["schedule"] = schedule
    for stage, measured, memory in zip(p["stages"], m["stages"], summary["memory"]):
        stage["fwd_s"], stage["bwd_s"] = measured["fwd_s"], measured["bwd_s"]
        stage["bwd_weight_s"] = min(stage.get("bwd_weight_s", 0), measured["bwd_s"])
        stage["launch_count"] = memory["launch_count"]
    path = measured_plan_file.replace("measured_plan.json", "calibrated_plan.json")
    tb.write(path, json.dumps(p))
    return tb.simulate(harp, path, schedule)


def plan_shape(p):
    return json.dumps([(s["layers"], s["dp"], s["tp"], s.get("zero", 0), s.get("shares"), s["devices"])
                       for s in p["stages"]])


def stage_rows(setup, label, sched, p, measured_plan):
    rows = []
    for i, (ps, ms) in enumerate(zip(p["stages"], measured_plan["stages"])):
        predicted = ps["fwd_s"] + ps["bwd_s"]
        measured = ms["fwd_s"] + ms["bwd_s"]
        rows.append(dict(setup=setup, plan=label, schedule=sched, stage=i, device=ps.get("device", ""),
                         layers="%d-%d" % tuple(ps["layers"]), dp=ps["dp"], tp=ps["tp"],
                         predicted_s=predicted,
                         fixed_s=ps.get("fixed_fwd_s", 0) + ps.get("fixed_bwd_s", 0),
                         measured_s=measured, error=error(predicted, measured)))
    return rows


def paired_rows(setup, label, p, first_dir, second_dir, key, **fields):
    """The plan's stage rows (harp-1f1b) from the run in first_dir, each with `fields`,
    then the same stage's measured time and error from the run in second_dir as
    key + "measured_s" and key + "error"."""
    read = lambda d: json.load(open(os.path.join(d, "measured_plan.json")))
    rows = stage_rows(setup, label, SCHEDULES[0], p, read(first_dir))
    for r, x in zip(rows, stage_rows(setup, label, SCHEDULES[0], p, read(second_dir))):
        r.update(fields)
        r[key + "measured_s"], r[key + "error"] = x["measured_s"], x["error"]
    return rows


def packet_rows(a, folder, name, label, p, job, cl, plan_file, default_run, data, out):
    """The plan trained once more under harp-1f1b on a testbed of --compare-packet-us
    packets, beside its default run: one row per stage, the iteration's errors on each."""
    run_dir = os.path.join(folder, "packets%g_%s" % (a.compare_packet_us, label))
    if os.path.exists(os.path.join(run_dir, "summary.json")):  # --reuse
        s = json.load(open(os.path.join(run_dir, "summary.json")))
    else:
        s = tb.train(a.harp, job, cl, plan_file, data or tb.corpus(a.harp, out), run_dir, schedule=SCHEDULES[0],
                     packet_us=a.compare_packet_us)
    d_dir, d = default_run
    rows = paired_rows(name, label, p, d_dir, run_dir, "other_", packet_us=a.compare_packet_us)
    for r in rows:
        r.update(iteration_error=error(d["predicted_s"], d["measured_median_s"]),
                 other_iteration_error=error(s["predicted_s"], s["measured_median_s"]))
    print("%-10s %-13s %s: iteration %+.1f%%, stages %s; with %g us packets: iteration %+.1f%%, stages %s" % (
        name, label, SCHEDULES[0], 100 * rows[0]["iteration_error"], " ".join("%+.0f%%" % (100 * r["error"]) for r in rows),
        a.compare_packet_us, 100 * rows[0]["other_iteration_error"],
        " ".join("%+.0f%%" % (100 * r["other_error"]) for r in rows)), flush=True)
    return rows


def write_packets(a, packets):
    tb.write_csv(os.path.join(a.out, "testbed_accuracy_packets.csv"), packets)
    plans = [r for r in packets if r["stage"] == 0]
    for key, title in (("", "the default packets"), ("other_", "%g us packets" % a.compare_packet_us)):
        i, s = summarize([r[key + "iteration_error"] for r in plans]), summarize([r[key + "error"] for r in packets])
        mean = sum(r[key + "error"] for r in packets) / len(packets)
        print("harp-1f1b, %s: %d plans, iteration |error| median %.1f%%, worst %.1f%%, within 10%%: %d; %d stages, "
              "|error| median %.1f%%, mean error %+.1f%%, within 10%%: %d" % (title, i[3], 100 * i[0], 100 * i[1],
                                                                             i[2], s[3], 100 * s[0], 100 * mean, s[2]))


def prepared(a, folder, name, pools, links, model, microbatches, microbatch_size, sizes):
    """A setup's (cluster, job, profile) files: written and profiled, or under --reuse the
    ones a previous invocation left in folder."""
    if a.reuse:
        return tuple(os.path.join(folder, f) for f in ("cluster.yaml", "job.yaml", "profile.json"))
    print("%s: profiling (microbatch sizes %s)" % (name, ",".join(map(str, sizes))), flush=True)
    return tb.setup(a.harp, folder, name, pools, links, model, microbatches, microbatch_size, a.steps, sizes)


def planned(a, job, prof, strategy, plan_file, max_tp=1, flags=()):
    """The plan: made by `harp plan`, or under --reuse read back."""
    return json.load(open(plan_file)) if a.reuse else tb.plan(a.harp, job, prof, strategy, plan_file, max_tp, flags)


def trained(a, run_dir, job, cl, plan_file, data, **train_args):
    """The run's summary.json: trained now (tb.train), or under --reuse read back."""
    if a.reuse:
        return json.load(open(os.path.join(run_dir, "summary.json")))
    return tb.train(a.harp, job, cl, plan_file, data, run_dir, **train_args)


def floor_rows(a, out, data):
    """Each device type of the first setup alone: a one-stage plan of its model on one
    device, trained twice on 127.0.0.1; a row per run."""
    _, pools, _, model, microbatches, microbatch_size, sizes = SETUPS[0][:7]
    rows = []
    for pool, device, _ in pools:
        folder = os.path.join(out, "floor", device)
        cl, job, prof = prepared(a, folder, "floor-" + device, [(pool, device, 1)], [], model, microbatches,
                                 microbatch_size, sizes)
        plan_file = os.path.join(folder, "harp.json")
        p = planned(a, job, prof, "harp", plan_file)
        for k in (1, 2):
            run_dir = os.path.join(folder, "run%d" % k)
            s = trained(a, run_dir, job, cl, plan_file, data, schedule=SCHEDULES[0], loopback_ranks=1)
            st = stage_rows("floor", device, SCHEDULES[0], p, json.load(open(os.path.join(run_dir, "measured_plan.json"))))
            rows.append(dict(device=device, run=k, predicted_s=s["predicted_s"], measured_s=s["measured_median_s"],
                             error=error(s["predicted_s"], s["measured_median_s"]),
                             stage_predicted_s=st[0]["predicted_s"], stage_measured_s=st[0]["measured_s"],
                             stage_error=st[0]["error"]))
        one, two = rows[-2:]
        print("floor %s alone, one stage: iteration %+.1f%% then %+.1f%%, stage compute %+.1f%% then %+.1f%%; "
              "the second run's iteration %+.1f%% from the first" % (
                  device, 100 * one["error"], 100 * two["error"], 100 * one["stage_error"], 100 * two["stage_error"],
                  100 * (two["measured_s"] / one["measured_s"] - 1)), flush=True)
    return rows


def write_floor(a, floor):
    tb.write_csv(os.path.join(a.out, "testbed_accuracy_floor.csv"), floor)
    it, st = summarize([r["error"] for r in floor]), summarize([r["stage_error"] for r in floor])
    apart = summarize([floor[i + 1]["measured_s"] / floor[i]["measured_s"] - 1 for i in range(0, len(floor), 2)])
    print("floor: %d runs of one device alone: iteration |error| median %.1f%%, worst %.1f%%; stage compute median "
          "%.1f%%, worst %.1f%%; two runs of one plan apart by %.1f%% median, %.1f%% worst"
          % (it[3], 100 * it[0], 100 * it[1], 100 * st[0], 100 * st[1], 100 * apart[0], 100 * apart[1]))


def summarize(values):
    errs = sorted(abs(v) for v in values)
    return tb.median(errs), errs[-1], sum(e <= 0.10 for e in errs), len(errs)


def main():
    def extra(ap):
        ap.add_argument("--only", default="", help="comma-separated setup names")
        ap.add_argument("--reuse", action="store_true", help="recompute from the runs already in OUT")
        ap.add_argument("--loopback", action="store_true", help="also train each plan with unshaped links")
        ap.add_argument("--compare-packet-us", type=float, default=0,
                        help="also train each plan under harp-1f1b with this packet time (us)")
        ap.add_argument("--floor", action="store_true", help="also train each device type alone, twice")
    a = tb.arguments(__doc__, extra)
    out = os.path.join(a.out, "testbed_accuracy")
    data = None if a.reuse else tb.corpus(a.harp, out)
    only = set(filter(None, a.only.split(",")))
    rows, stages, loopback, packets = [], [], [], []
    floor = floor_rows(a, out, data) if a.floor else []
    for name, pools, links, model, mbs_count, mbs, sizes, variants, schedules in SETUPS:
        if only and name not in only:
            continue
        folder = os.path.join(out, name)
        cl, job, prof = prepared(a, folder, name, pools, links, model, mbs_count, mbs, sizes)
        seen = set()
        for label, strategy, flags in variants:
            plan_file = os.path.join(folder, label + ".json")
            p = planned(a, job, prof, strategy, plan_file, max_tp=2, flags=flags)
            shape = plan_shape(p)
            if shape in seen:
                continue
            seen.add(shape)
            runs = {}
            for sched in schedules:
                run_dir = os.path.join(folder, "run_%s_%s" % (label, sched))
                runs[sched] = (run_dir, trained(a, run_dir, job, cl, plan_file, data, schedule=sched))
            if a.compare_packet_us:
                packets += packet_rows(a, folder, name, label, p, job, cl, plan_file, runs[SCHEDULES[0]], data, out)
            if a.loopback:
                run_dir = os.path.join(folder, "loopback_%s" % label)
                ranks = sum(len(st["devices"]) for st in p["stages"])
                if not os.path.exists(os.path.join(run_dir, "measured_plan.json")):  # also under --reuse
                    data = data or tb.corpus(a.harp, out)
                    tb.train(a.harp, job, cl, plan_file, data, run_dir, schedule=SCHEDULES[0], loopback_ranks=ranks)
                lo = paired_rows(name, label, p, run_dir, runs[SCHEDULES[0]][0], "shaped_", ranks=ranks)
                loopback += lo
                print("%-10s %-13s loopback (%d ranks): stages %s; shaped links: %s" % (
                    name, label, ranks, " ".join("%+.0f%%" % (100 * r["error"]) for r in lo),
                    " ".join("%+.0f%%" % (100 * r["shaped_error"]) for r in lo)), flush=True)
            for i, sched in enumerate(schedules):
                run_dir, s = runs[sched]
                other_dir = runs[schedules[(i + 1) % len(schedules)]][0]
                calibrated = calibrated_s(a.harp, plan_file, os.path.join(other_dir, "measured_plan.json"), sched, s)
                measured = s["measured_median_s"]
                mixed = any(st.get("shares") and len(set(st.get("replica_devices", []))) > 1 for st in p["stages"])
                row = dict(setup=name, model=model, plan=label, schedule=sched, stages=len(p["stages"]),
                           dp=",".join(str(st["dp"]) for st in p["stages"]),
                           tp=",".join(str(st["tp"]) for st in p["stages"]),
                           zero=",".join(str(st.get("zero", 0)) for st in p["stages"]), mixed=mixed,
                           cuts=",".join(str(st["layers"][0]) for st in p["stages"]),
                           predicted_s=s["predicted_s"], calibrated_s=calibrated, measured_s=measured,
                           error=error(s["predicted_s"], measured), calibrated_error=error(calibrated, measured))
                rows.append(row)
                measured_plan = json.load(open(os.path.join(run_dir, "measured_plan.json")))
                st_rows = stage_rows(name, label, sched, p, measured_plan)
                stages += st_rows
                print("%-10s %-13s %-9s dp %-7s tp %-7s predicted %.3f s (%+.1f%%)  calibrated %.3f s (%+.1f%%)  "
                      "measured %.3f s;  stages %s" % (name, label, sched, row["dp"], row["tp"], row["predicted_s"],
                                                       100 * row["error"], calibrated, 100 * row["calibrated_error"],
                                                       measured, " ".join("%+.0f%%" % (100 * r["error"])
                                                                          for r in st_rows)), flush=True)
    if floor:
        write_floor(a, floor)
    if not rows:  # --only named no setup
        return
    tb.write_csv(os.path.join(a.out, "testbed_accuracy.csv"), rows)
    tb.write_csv(os.path.join(a.out, "testbed_accuracy_stages.csv"), stages)
    if loopback:
        tb.write_csv(os.path.join(a.out, "testbed_accuracy_loopback.csv"), loopback)
        lo, sh = summarize([r["error"] for r in loopback]), summarize([r["shaped_error"] for r in loopback])
        print("loopback: %d stages, compute |error| median %.1f%%, worst %.1f%%, within 10%%: %d; the same stages "
              "through the shaped links: median %.1f%%, worst %.1f%%, within 10%%: %d"
              % (lo[3], 100 * lo[0], 100 * lo[1], lo[2], 100 * sh[0], 100 * sh[1], sh[2]))
    if packets:
        write_packets(a, packets)
    it, cal, st = (summarize([r[k] for r in src]) for k, src in (("error", rows), ("calibrated_error", rows),
                                                                  ("error", stages)))
    note = ("|error| from the profile: median %.1f%%, worst %.1f%%;\ncalibrated: median %.1f%%, worst %.1f%%; "
            "band: +-10%%" % (100 * it[0], 100 * it[1], 100 * cal[0], 100 * cal[1]))
    label = lambda r: "%s %s %s" % (r["setup"], r["plan"], r["schedule"])
    tb.scatter_chart(os.path.join(a.out, "testbed_accuracy.svg"),
                     "Simulator accuracy on the testbed: %d plans" % len(rows),
                     [(label(r), r["predicted_s"], r["measured_s"]) for r in rows], note=note,
                     second=[(label(r), r["calibrated_s"], r["measured_s"]) for r in rows],
                     names=("from the profile", "calibrated (another run's stage times)"))
    tb.histogram_chart(os.path.join(a.out, "testbed_accuracy_hist.svg"),
                       "Prediction error from the profile: %d iterations, %d stages" % (len(rows), len(stages)),
                       [("iteration (%d plans)" % len(rows), [100 * r["error"] for r in rows]),
                        ("stage compute per microbatch (%d)" % len(stages), [100 * r["error"] for r in stages])],
                       "(predicted - measured) / measured (%)", bin_width=2.5,
                       note="iteration: median |error| %.1f%%, worst %.1f%%; stages within 10%%: %d of %d"
                            % (100 * it[0], 100 * it[1], st[2], st[3]))
    print("%d plans: %s; within 10%%: %d (profile), %d (calibrated)" % (len(rows), note.replace("\n", " "), it[2],
                                                                          cal[2]))
    print("%d stages: compute |error| median %.1f%%, worst %.1f%%, within 10%%: %d (%.0f%%)"
          % (st[3], 100 * st[0], 100 * st[1], st[2], 100.0 * st[2] / st[3]))
    print("wrote %s/testbed_accuracy.csv, testbed_accuracy_stages.csv, testbed_accuracy.svg, testbed_accuracy_hist.svg"
          % a.out)


if __name__ == "__main__":
    main()
