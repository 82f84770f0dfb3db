#!/usr/bin/env python3
"""Side by side: llama.cpp's own `llama-bench` and `ragkv bench prefill` on the same GGUF, prompt
length and thread count, CPU only on both sides; prints one JSON object with both engines' rates,
every sample behind them, the settings of both tools, and the ratios ours / llama.cpp.

Quantities. Prefill tokens/s of a TOKENS-token prompt, and decode tokens/s at two context depths,
each engine at the same one: after an empty context (llama-bench's tg test; ours after a one-token
prompt) and after the prompt (llama-bench's tg test at -d TOKENS; ours after the timed prefill).
Comparing only the second of ours with the first of llama.cpp's, as this script once did,
favoured llama.cpp by the attention over the prompt.

Statistic: the median of individually recorded samples on both sides (Python's
statistics.median: the mean of the two middle values for an even count), never llama-bench's
mean (`avg_ts`, which this script once set against our median).
  - llama.cpp: llama-bench -r REPETITIONS -o json prints each repetition's rate in `samples_ts`
    (and its time in `samples_ns`); those lists are the samples. A llama-bench whose JSON has no
    `samples_ts` is refused (exit with an error).
  - ragkv: `bench prefill` prints only medians over its --repetitions (no per-repetition rates),
    so this script runs it REPETITIONS times with `--repetitions 1` (each run: model load, one
    warm-up prefill, one timed prefill, one timed decode) and takes each run's figures as one
    sample: `prefill_tokens_per_s_median` and `decode_tokens_per_s` of a TOKENS-token run, and
    `decode_tokens_per_s` of a one-token run. Nothing in the C++ was changed for this.
  Each side thus has REPETITIONS samples per quantity per round.

Order. A shared machine's load drifts, so whoever runs first is favoured or hurt. With --rounds R,
round i runs llama-bench first when i is even and ragkv first when i is odd. All samples of all
rounds are pooled per side and quantity for the headline medians and ratios (ours / llama.cpp of
the pooled medians); each round's samples, medians and ratios are kept too.

Recorded. The exact command lines run; threads, tokens, decode tokens, repetitions, rounds; the
model's path and size in bytes; `llama_bench_settings`: every field of llama-bench's first test
object except the results (avg/stddev/samples of ns and ts, test_time) and the fields naming the
test (n_prompt, n_gen, n_depth), which stay with each test's samples — its build_commit,
build_number, cpu_info, backends, n_threads, type_k/type_v, n_batch/n_ubatch, flash_attn and so
on; any test object whose settings differ from the first's is listed in
`llama_bench_settings_mismatches`. For ragkv: `ragkv --version`'s output, the sha256 of the
binary, and the non-result fields of its first result (arch, device, threads, ...). The
environment variables that steer either engine's threads (OMP_*, GOMP_*, KMP_*, GGML_*,
LLAMA_*, RAGKV_*), the CPU count and the load average before and after. Warm-up: llama-bench runs
its own untimed warm-up per test; each ragkv run an untimed warm-up prefill.

JSON keys: script, statistic, started_utc, finished_utc, model, model_bytes, threads,
prompt_tokens, decode_tokens, repetitions, rounds, commands {llama_bench, ragkv},
llama_bench_binary {path, sha256}, llama_bench_settings, llama_bench_settings_mismatches,
ragkv_binary {path, sha256, version}, ragkv_settings, host {platform, cpu_count, loadavg_start,
loadavg_end}, env, warnings; llamacpp and ragkv, each {QUANTITY: pooled median for QUANTITY in
prefill_tokens_per_s, decode_empty_tokens_per_s, decode_after_prompt_tokens_per_s; samples
{QUANTITY: [...]}; n_samples {QUANTITY: n}} (ragkv also peak_rss_mib, the largest of its runs');
prefill_ratio, decode_ratio_empty, decode_ratio_after_prompt (pooled, ours / llama.cpp); per_round
[{round, order, llamacpp and ragkv as above plus runs [{command, t_start_s, t_end_s, and tests
(llama-bench's per-test records with samples_ts, samples_ns) or result (ragkv's result object)}],
and the three ratios of that round}].

Output. The JSON object goes to stdout; a human-readable summary goes to stderr. Ratios are
stored unrounded in the JSON; printed lines give them with two decimals, except that a ratio two
decimals would print as 1.00 is printed with as many decimals as it takes to show on which side
of 1 it lies (0.9991 → 0.999): a shortfall is never rounded into parity.

llama-bench is built outside the repo from llama.cpp's source (for example the copy vendored in
the llama-cpp-python source package: cmake -B build -DGGML_NATIVE=ON, then cmake --build build
--target llama-bench); it is not part of `make setup`. It is run with -ngl 0, as ragkv with
--device cpu. Machines are shared: quote ranges over rounds, not one figure.

    python3 bench/llama_bench_compare.py --llama-bench PATH/llama-bench --ragkv build/ragkv \\
        --model models/X.gguf --threads 2 --tokens 512 --decode-tokens 32 --repetitions 3 \\
        --rounds 2 > result.json
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time

T0 = time.monotonic()

QUANTITIES = ("prefill_tokens_per_s", "decode_empty_tokens_per_s", "decode_after_prompt_tokens_per_s")
RATIO_KEYS = {"prefill_tokens_per_s": "prefill_ratio", "decode_empty_tokens_per_s": "decode_ratio_empty",
              "decode_after_prompt_tokens_per_s": "decode_ratio_after_prompt"}
# Fields of a llama-bench test object that are its results, and those that name the test.
LB_RESULT_FIELDS = {"test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts"}
LB_TEST_FIELDS = {"n_prompt", "n_gen", "n_depth"}
# Fields of a `ragkv bench prefill` result object that are measurements, not settings.
RAGKV_RESULT_FIELDS = {"load_ms", "prefill_ms_best", "prefill_ms_median", "prefill_tokens_per_s", "prefill_tflops",
                       "prefill_tokens_per_s_median", "decode_tokens_per_s", "decode_batch_tokens_per_s",
                       "peak_rss_mib", "peak_rss_mib_with_batch"}
ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "GGML_", "LLAMA_", "RAGKV_")


def run_cmd(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed (exit {p.returncode}): {shlex.join(cmd)}\n{p.stderr[-4000:]}")
    return p.stdout


def run_json(cmd, runs):
    """Runs cmd, appends {command, t_start_s, t_end_s} (seconds since the script started) to runs
    and returns the parsed stdout."""
    t_start = time.monotonic() - T0
    out = run_cmd(cmd)
    runs.append({"command": shlex.join(cmd), "t_start_s": round(t_start, 3), "t_end_s": round(time.monotonic() - T0, 3)})
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        sys.exit(f"no JSON on stdout of {shlex.join(cmd)}: {e}\n{out[:2000]}")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def resolve(exe):
    return shutil.which(exe) or exe


def fmt_ratio(r):
    """Two decimals, unless those read 1.00 for a ratio that is not exactly 1: then enough decimals
    to show the side of 1 it is on."""
    if r is None:
        return "n/a"
    s = f"{r:.2f}"
    if s == "1.00" and r != 1.0:
        for d in range(3, 10):
            s = f"{r:.{d}f}"
            if float(s) != 1.0:
                break
        s += " (just under parity)" if r < 1 else " (just over parity)"
    return s


def median(v):
    return statistics.median(v) if v else None


def ratio(ours, theirs):
    return ours / theirs if ours is not None and theirs else None


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ---------------------------------------------------------------------------------------- llama.cpp

def llama_bench_round(a, state):
    """One round of llama-bench: pp TOKENS + tg DECODE, then tg DECODE at depth TOKENS, each with
    -r REPETITIONS. Returns ({quantity: samples}, [run records])."""
    base = [a.llama_bench, "-m", a.model, "-r", str(a.repetitions), "-t", str(a.threads), "-ngl", "0", "-o", "json"]
    cmds = [base + ["-p", str(a.tokens), "-n", str(a.decode_tokens)],
            base + ["-p", "0", "-n", str(a.decode_tokens), "-d", str(a.tokens)]]
    samples = {q: [] for q in QUANTITIES}
    runs = []
    for i, cmd in enumerate(cmds):
        tests = run_json(cmd, runs)
        if not isinstance(tests, list) or not tests:
            sys.exit(f"llama-bench printed no test objects: {shlex.join(cmd)}")
        records = []
        for t in tests:
            if "samples_ts" not in t:
                sys.exit("llama-bench's JSON has no samples_ts (per-repetition rates); this script needs them "
                         f"for medians (a newer llama-bench has them): {shlex.join(cmd)}")
            n_prompt, n_gen, n_depth = t.get("n_prompt", 0), t.get("n_gen", 0), t.get("n_depth", 0)
            q = None
            if i == 0 and n_prompt == a.tokens and n_gen == 0 and n_depth == 0:
                q = "prefill_tokens_per_s"
            elif i == 0 and n_prompt == 0 and n_gen == a.decode_tokens and n_depth == 0:
                q = "decode_empty_tokens_per_s"
            elif i == 1 and n_prompt == 0 and n_gen == a.decode_tokens and n_depth == a.tokens:
                q = "decode_after_prompt_tokens_per_s"
            if q is not None:
                if len(t["samples_ts"]) != a.repetitions:
                    sys.exit(f"llama-bench gave {len(t['samples_ts'])} samples for {q}, not {a.repetitions}")
                samples[q].extend(float(x) for x in t["samples_ts"])
            settings = {k: v for k, v in t.items() if k not in LB_RESULT_FIELDS | LB_TEST_FIELDS}
            if state.get("llama_bench_settings") is None:
                state["llama_bench_settings"] = settings
            elif settings != state["llama_bench_settings"]:
                first = state["llama_bench_settings"]
                state["llama_bench_settings_mismatches"].append({
                    "command": shlex.join(cmd), "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth,
                    "differs": {k: [first.get(k), settings.get(k)] for k in first.keys() | settings.keys()
                                if first.get(k) != settings.get(k)}})
            records.append({"quantity": q, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": n_depth,
                            **{k: t[k] for k in sorted(LB_RESULT_FIELDS) if k in t}})
        runs[-1]["tests"] = records
    missing = [q for q in QUANTITIES if not samples[q]]
    if missing:
        sys.exit(f"llama-bench printed no results for {', '.join(missing)} (wanted pp{a.tokens}, "
                 f"tg{a.decode_tokens} and tg{a.decode_tokens} @ d{a.tokens})")
    return samples, runs


# -------------------------------------------------------------------------------------------- ragkv

def ragkv_round(a, state):
    """One round of ragkv: REPETITIONS pairs of `bench prefill --repetitions 1` runs (TOKENS-token
    prompt; one-token prompt), one sample per quantity per pair."""
    def cmd_for(tokens):
        return [a.ragkv, "bench", "prefill", "--models", a.model, "--tokens", str(tokens), "--decode-tokens",
                str(a.decode_tokens), "--repetitions", "1", "--decode-batch", "1", "--device", "cpu",
                "--threads", str(a.threads)]

    samples = {q: [] for q in QUANTITIES}
    runs = []
    for _ in range(a.repetitions):
        for tokens in (a.tokens, 1):
            cmd = cmd_for(tokens)
            r = run_json(cmd, runs)["results"][0]
            if r.get("prompt_tokens") != tokens or r.get("decode_tokens") != a.decode_tokens:
                sys.exit(f"ragkv ran {r.get('prompt_tokens')} + {r.get('decode_tokens')} tokens, "
                         f"asked {tokens} + {a.decode_tokens}: {shlex.join(cmd)}")
            if tokens == a.tokens:
                samples["prefill_tokens_per_s"].append(r["prefill_tokens_per_s_median"])
                samples["decode_after_prompt_tokens_per_s"].append(r["decode_tokens_per_s"])
            else:
                samples["decode_empty_tokens_per_s"].append(r["decode_tokens_per_s"])
            if state.get("ragkv_settings") is None and tokens == a.tokens:
                state["ragkv_settings"] = {k: v for k, v in r.items() if k not in RAGKV_RESULT_FIELDS}
            runs[-1]["result"] = r
    return samples, runs


# --------------------------------------------------------------------------------------------- main

def side_summary(samples):
    return {**{q: median(samples[q]) for q in QUANTITIES}, "samples": samples,
            "n_samples": {q: len(samples[q]) for q in QUANTITIES}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--ragkv", default="build/ragkv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repetitions", type=int, default=3, help="samples per side, quantity and round")
    ap.add_argument("--rounds", type=int, default=2,
                    help="round i runs llama-bench first when i is even, ragkv first when odd")
    a = ap.parse_args()
    if min(a.threads, a.tokens, a.decode_tokens, a.repetitions, a.rounds) < 1:
        sys.exit("threads, tokens, decode tokens, repetitions and rounds must be >= 1")
    a.llama_bench, a.ragkv = resolve(a.llama_bench), resolve(a.ragkv)
    for path in (a.llama_bench, a.ragkv, a.model):
        if not os.path.isfile(path):
            sys.exit(f"not a file: {path}")

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = loadavg()
    ragkv_version = subprocess.run([a.ragkv, "--version"], capture_output=True, text=True)
    state = {"llama_bench_settings": None, "llama_bench_settings_mismatches": [], "ragkv_settings": None}
    pooled = {"llamacpp": {q: [] for q in QUANTITIES}, "ragkv": {q: [] for q in QUANTITIES}}
    rounds = []
    for i in range(a.rounds):
        order = ("llama-bench", "ragkv") if i % 2 == 0 else ("ragkv", "llama-bench")
        rec = {"round": i, "order": list(order)}
        for who in order:
            if who == "llama-bench":
                s, runs = llama_bench_round(a, state)
                rec["llamacpp"] = {**side_summary(s), "runs": runs}
                side = "llamacpp"
            else:
                s, runs = ragkv_round(a, state)
                rec["ragkv"] = {**side_summary(s), "runs": runs}
                side = "ragkv"
            for q in QUANTITIES:
                pooled[side][q].extend(s[q])
        rec.update({RATIO_KEYS[q]: ratio(rec["ragkv"][q], rec["llamacpp"][q]) for q in QUANTITIES})
        rounds.append(rec)
        print(f"round {i} ({order[0]} first), median of {a.repetitions} per side: " + "; ".join(
            f"{q.removesuffix('_tokens_per_s')} llama.cpp {rec['llamacpp'][q]:.1f}, ours {rec['ragkv'][q]:.1f} tok/s, "
            f"ours/llama.cpp {fmt_ratio(rec[RATIO_KEYS[q]])}" for q in QUANTITIES), file=sys.stderr)

    lc, ours = side_summary(pooled["llamacpp"]), side_summary(pooled["ragkv"])
    peaks = [r["result"].get("peak_rss_mib") for rec in rounds for r in rec["ragkv"]["runs"]]
    ours["peak_rss_mib"] = max((p for p in peaks if p is not None), default=None)
    ratios = {RATIO_KEYS[q]: ratio(ours[q], lc[q]) for q in QUANTITIES}
    warnings = []
    lb_threads = (state["llama_bench_settings"] or {}).get("n_threads")
    if lb_threads is not None and lb_threads != a.threads:
        warnings.append(f"llama-bench ran {lb_threads} threads, asked {a.threads}")
    rk_threads = (state["ragkv_settings"] or {}).get("threads")
    if rk_threads is not None and rk_threads != a.threads:
        warnings.append(f"ragkv ran {rk_threads} threads, asked {a.threads}")
    if state["llama_bench_settings_mismatches"]:
        warnings.append("llama-bench's settings differ between test objects (llama_bench_settings_mismatches)")
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    out = {
        "script": "bench/llama_bench_compare.py",
        "statistic": "median of individually recorded samples (statistics.median), both sides; llama.cpp: "
                     "llama-bench samples_ts; ragkv: one `bench prefill --repetitions 1` run per sample",
        "started_utc": started,
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": a.model, "model_bytes": os.path.getsize(a.model),
        "threads": a.threads, "prompt_tokens": a.tokens, "decode_tokens": a.decode_tokens,
        "repetitions": a.repetitions, "rounds": a.rounds,
        "commands": {
            "llama_bench": sorted({r["command"] for rec in rounds for r in rec["llamacpp"]["runs"]}),
            "ragkv": sorted({r["command"] for rec in rounds for r in rec["ragkv"]["runs"]}),
        },
        "llama_bench_binary": {"path": a.llama_bench, "sha256": sha256_of(a.llama_bench)},
        "llama_bench_settings": state["llama_bench_settings"],
        "llama_bench_settings_mismatches": state["llama_bench_settings_mismatches"],
        "ragkv_binary": {"path": a.ragkv, "sha256": sha256_of(a.ragkv),
                         "version": (ragkv_version.stdout.strip() or None) if ragkv_version.returncode == 0 else None},
        "ragkv_settings": state["ragkv_settings"],
        "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                 "loadavg_start": load_start, "loadavg_end": loadavg()},
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "warnings": warnings,
        "llamacpp": lc, "ragkv": ours,
        **ratios,
        "per_round": rounds,
    }
    print(f"pooled over {a.rounds} round(s), median of {lc['n_samples']['prefill_tokens_per_s']} samples per side: "
          + "; ".join(f"{q.removesuffix('_tokens_per_s')} llama.cpp {lc[q]:.1f}, ours {ours[q]:.1f} tok/s, "
                      f"ours/llama.cpp {fmt_ratio(ratios[RATIO_KEYS[q]])}" for q in QUANTITIES), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
