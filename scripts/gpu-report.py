#!/usr/bin/env python3
"""The one table of a GPU run (issue 40 item 7): reads what scripts/gpu-validate.sh left in OUT_DIR
and writes OUT_DIR/gpu-report.json and OUT_DIR/gpu-report.md.

  python3 scripts/gpu-report.py OUT_DIR

Rows, each only where its file is there (a step that failed or ran out of time leaves a gap, and the
table says which file was missing):
  - prefill TFLOP/s of `bench prefill` (bench/prefill-bench.cpp counts every matmul and attention
    pair) and its share of the chip's dense bf16 peak; decode tokens/s of one sequence and the
    bandwidth it implies: (decode_weight_bytes + kv_bytes_per_position x the mean context of the
    timed decode) x tokens/s, as a share of the chip's HBM bandwidth — for the bf16 model and the
    Q4_K_M model (weights kept quantised, and converted to f16 at load), and for the bf16 model with
    RAGKV_CUDA_ATTENTION=f32, with RAGKV_CUDA_FFN_PRODUCTS=f32 and with decode op by op
    (RAGKV_CUDA_GRAPHS=0) where those steps ran, each with its backend paths and how its decode
    steps ran as graphs (captured, replayed, missed); where a bench of the default paths failed,
    its rerun on the paths before (NAME-safe.json), said so in the row;
  - each mode's TTFT per KV tier over `full` (bench reuse), with the loading controller on
    (bench-reuse.json, the GPU's default) and off (bench-reuse-no-control.json), and blend with
    every attention on the f32 kernel, mass passes included (bench-reuse-attn-f32.json,
    RAGKV_CUDA_ATTENTION=f32);
  - device-check's teacher-forced agreement per model (top-1 rate, first-token KL);
  - where the time goes, from the RAGKV_CUDA_PROFILE files (profile-*.json, cuda/op-profile.h): per
    section (the bench's prefill and decodes, each mode and tier) and phase (prefill: ops over more
    than 8 rows; decode: up to 8) the device's busy and idle time, and the ops that take the most;
  - llama.cpp's llama-bench on the same GGUF files, where llama-bench-bf16.json / -q4km.json are
    there (`llama-bench -p TOKENS -n 32 -d 0,TOKENS -o json`), and our ratios to it.
The chip's reachable limits, where bench-device.json is there (`ragkv bench device`: cuBLAS GEMM
TFLOP/s, device copy GB/s): prefill as a share of cuBLAS's f16 GEMM rate, decode as a share of the
copy bandwidth, beside the data-sheet shares.
Peaks (dense, no sparsity; NVIDIA's data sheets): H100 SXM 989 TFLOP/s bf16 and 3.35 TB/s, H100
PCIe 756 and 2.0, H100 NVL 835 and 3.9, H200 989 and 4.8. The chip comes from nvidia-smi.txt.
"""
import json
import os
import re
import sys

PEAKS = [  # (pattern in the GPU name, bf16 TFLOP/s, HBM bytes/s)
    (r"H200", 989.0, 4.8e12),
    (r"H100.*PCIe", 756.0, 2.0e12),
    (r"H100.*NVL", 835.0, 3.9e12),
    (r"H100", 989.0, 3.35e12),
]

PREFILL_RUNS = [  # (file, label)
    ("bench-prefill.json", "8B-shaped bf16"),
    ("bench-prefill-attn-f32.json", "8B-shaped bf16, RAGKV_CUDA_ATTENTION=f32"),
    ("bench-prefill-ffn-f32.json", "8B-shaped bf16, RAGKV_CUDA_FFN_PRODUCTS=f32"),
    ("bench-prefill-q4km.json", "8B-shaped Q4_K_M, weights quantised on the device"),
    ("bench-prefill-q4km-f16.json", "8B-shaped Q4_K_M, RAGKV_CUDA_WEIGHTS=f16"),
    ("bench-prefill-q4km-quant-f16.json", "8B-shaped Q4_K_M, RAGKV_CUDA_WEIGHTS=quant+f16"),
    ("bench-prefill-q4km-f32-acts.json", "8B-shaped Q4_K_M, RAGKV_CUDA_DECODE_ACTS=f32"),
    ("bench-prefill-separate-stores.json", "8B-shaped bf16, RAGKV_CUDA_GEMV_STORES=separate"),
    ("bench-prefill-q4km-separate-stores.json", "8B-shaped Q4_K_M, RAGKV_CUDA_GEMV_STORES=separate"),
    ("bench-prefill-op-by-op.json", "8B-shaped bf16, decode op by op (RAGKV_CUDA_GRAPHS=0)"),
    ("bench-prefill-q4km-op-by-op.json", "8B-shaped Q4_K_M, decode op by op (RAGKV_CUDA_GRAPHS=0)"),
]
SAFE_NOTE = " — FAILED on the default paths; rerun on the paths before"


def load(out, name, missing):
    path = os.path.join(out, name)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        missing.append(name)
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        missing.append(f"{name} (not JSON: {e})")
        return None


def load_run(out, name, missing):
    """A bench's JSON, or where it failed the rerun on the paths before that gpu-validate.sh left
    beside it (NAME-safe.json), then with a note for the label."""
    safe = name[:-len(".json")] + "-safe.json"
    if os.path.exists(os.path.join(out, safe)):
        data = load(out, safe, missing)
        missing.append(f"{name} (failed; {safe} used)")
        return data, SAFE_NOTE
    return load(out, name, missing), ""


def chip(out):
    path = os.path.join(out, "nvidia-smi.txt")
    text = open(path).read() if os.path.exists(path) else ""
    m = re.search(r"NVIDIA (H\d00[^|]*?)\s{2,}", text)
    name = ("NVIDIA " + m.group(1).strip()) if m else None
    for pattern, tflops, bw in PEAKS:
        if name and re.search(pattern, name):
            return name, tflops, bw
    return name, None, None


def prefill_row(label, result, peak_tflops, peak_bw, limits):
    tflops = result["prefill_tflops"]
    row = {"run": label, "prompt_tokens": result["prompt_tokens"], "prefill_ms": result["prefill_ms_best"],
           "prefill_tflops": tflops, "decode_tokens_per_s": result["decode_tokens_per_s"],
           "kernels": result.get("kernels"), "step_graphs": result.get("step_graphs") or None}
    if peak_tflops:
        row["prefill_pct_of_peak"] = 100.0 * tflops / peak_tflops
    if limits and limits.get("gemm_f16_f32out_tflops"):
        row["prefill_pct_of_cublas"] = 100.0 * tflops / limits["gemm_f16_f32out_tflops"]
    if "decode_weight_bytes" in result:
        context = result["prompt_tokens"] + result["decode_tokens"] / 2.0
        step_bytes = result["decode_weight_bytes"] + result["kv_bytes_per_position"] * context
        row["decode_bytes_per_step"] = step_bytes
        row["decode_bandwidth_gb_s"] = step_bytes * result["decode_tokens_per_s"] / 1e9
        if peak_bw:
            row["decode_pct_of_bandwidth"] = 100.0 * step_bytes * result["decode_tokens_per_s"] / peak_bw
        if limits and limits.get("copy_gb_s"):
            row["decode_pct_of_copy"] = 100.0 * row["decode_bandwidth_gb_s"] / limits["copy_gb_s"]
    return row


def llama_bench_rows(out, missing):
    rows = []
    for name in sorted(os.listdir(out)):
        if not (name.startswith("llama-bench-") and name.endswith(".json")):
            continue
        tests = load(out, name, missing) or []
        for t in tests:
            kind = "prefill" if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0 else "decode"
            rows.append({"file": name, "model": os.path.basename(t.get("model_filename", "")), "test": kind,
                         "n_prompt": t.get("n_prompt"), "n_gen": t.get("n_gen"), "n_depth": t.get("n_depth", 0),
                         "tokens_per_s": t.get("avg_ts"), "samples_ts": t.get("samples_ts")})
    return rows


# llama-bench-bf16.json pairs with bench-prefill.json, llama-bench-q4km.json with bench-prefill-q4km.json.
LLAMA_PAIRS = {"llama-bench-bf16.json": "bench-prefill.json", "llama-bench-q4km.json": "bench-prefill-q4km.json"}


def llama_ratios(out, rows, missing):
    """Ours / llama.cpp: prefill of the same prompt length on an empty context; decode after the prompt
    (llama-bench's tg at depth = the prompt, ours right after the timed prefill), or at depth 0 where
    llama-bench ran no deeper test (then said so: ours decodes after the prompt, a harder case)."""
    ratios = []
    for lb_file, ours_file in LLAMA_PAIRS.items():
        mine = [r for r in rows if r["file"] == lb_file]
        ours_data, note = load_run(out, ours_file, [])
        ours = (ours_data or {}).get("results", [])
        if not mine or not ours:
            continue
        o = ours[0]
        pp = [r for r in mine if r["test"] == "prefill" and r["n_prompt"] == o["prompt_tokens"] and not r["n_depth"]]
        tg = [r for r in mine if r["test"] == "decode" and r["n_depth"] == o["prompt_tokens"]]
        tg_depth0 = [r for r in mine if r["test"] == "decode" and not r["n_depth"]]
        entry = {"llama_bench": lb_file, "ours": ours_file + note}
        if pp:
            entry["prefill_ratio"] = o["prefill_tokens_per_s"] / pp[0]["tokens_per_s"]
        if tg or tg_depth0:
            entry["decode_ratio"] = o["decode_tokens_per_s"] / (tg or tg_depth0)[0]["tokens_per_s"]
            entry["decode_llama_depth"] = (tg or tg_depth0)[0]["n_depth"]
        ratios.append(entry)
    return ratios


PROFILES = [  # (file, label)
    ("profile-prefill-bf16.json", "bench prefill, 8B-shaped bf16"),
    ("profile-blend-bf16.json", "bench reuse, 8B-shaped bf16"),
    ("profile-prefill-q4km.json", "bench prefill, 8B-shaped Q4_K_M"),
]
PROFILE_TOP_OPS = 8


def profile_rows(out, missing):
    """Per profile, section (the bench's prefill, decode, mode and tier) and phase: busy and idle
    device time, and the longest ops with their shares."""
    rows = []
    for name, label in PROFILES:
        data = load(out, name, missing)
        if not data:
            continue
        for section in data.get("sections", []):
            for phase, p in sorted(section.get("phases", {}).items()):
                busy, idle = p["busy_ms"], p["idle_ms"]
                ops = [o for o in section.get("ops", []) if o["phase"] == phase][:PROFILE_TOP_OPS]
                rows.append({"profile": label, "file": name, "section": section.get("section", ""), "phase": phase,
                             "busy_ms": busy, "idle_ms": idle,
                             "idle_share": idle / (busy + idle) if busy + idle > 0 else None, "ops": p["ops"],
                             "top_ops": [{k: o[k] for k in ("op", "calls", "ms", "ms_per_call", "share_of_phase")}
                                         for o in ops]})
    return rows


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def markdown(report):
    lines = [f"# GPU run: {report['gpu'] or 'unknown GPU'}", ""]
    lim = report.get("limits")
    if lim:
        pk, bw = report["peak_bf16_tflops"], report["peak_hbm_bytes_per_s"]
        lines += [f"The chip (`ragkv bench device`): cuBLAS {lim['gemm_size']}³ GEMM {fmt(lim['gemm_f16_f32out_tflops'])} "
                  f"TFLOP/s with f16 in and f32 out, {fmt(lim['gemm_bf16_tflops'])} in bf16"
                  + (f" ({fmt(100 * lim['gemm_bf16_tflops'] / pk)} % of the {pk:.0f} peak)" if pk else "")
                  + f"; device copy {fmt(lim['copy_gb_s'])} GB/s"
                  + (f" ({fmt(100 * lim['copy_gb_s'] * 1e9 / bw)} % of HBM)" if bw else "") + ".", ""]
    lines += ["| run | prefill ms | TFLOP/s | % of bf16 peak | % of cuBLAS | decode tok/s | decode GB/s | % of HBM "
              "| % of copy | step graphs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["prefill"]:
        lines.append(f"| {r['run']} | {fmt(r['prefill_ms'])} | {fmt(r['prefill_tflops'])} | "
                     f"{fmt(r.get('prefill_pct_of_peak'))} | {fmt(r.get('prefill_pct_of_cublas'))} | "
                     f"{fmt(r['decode_tokens_per_s'])} | {fmt(r.get('decode_bandwidth_gb_s'))} | "
                     f"{fmt(r.get('decode_pct_of_bandwidth'))} | {fmt(r.get('decode_pct_of_copy'))} | "
                     f"{r.get('step_graphs') or '–'} |")
    kernels = sorted({r["kernels"] for r in report["prefill"] if r.get("kernels")})
    if kernels:
        lines += ["", "Backend paths (`Backend::kernels()`): " + "; ".join(f"`{k}`" for k in kernels)]
    if report["reuse"]:
        lines += ["", "| loading controller | attention | mode | KV tier | TTFT ms | / full | segments recomputed | "
                  "first token = full | logits bit-identical |", "|---|---|---|---|---|---|---|---|---|"]
        for r in report["reuse"]:
            rec = "–" if r["recomputed_segments"] is None else r["recomputed_segments"]
            same = r.get("first_logits_identical_to_full")
            lines.append(f"| {r['load_control']} | {r['attention']} | {r['mode']} | {r['kv_tier']} | "
                         f"{fmt(r['ttft_ms_median'])} | "
                         f"{fmt(r['ttft_ratio_vs_full'], 3)} | {rec} | {r['first_token_matches_full']} | "
                         f"{'–' if same is None else same} |")
    if report["device_check"]:
        dc = report["device_check"]
        lines += ["", f"device-check ({'passed' if dc.get('passed') else 'FAILED'}): teacher-forced agreement "
                  "with the CPU", "", "| model | top-1 equal | first-token KL mean | max | prefill rel. L2 |",
                  "|---|---|---|---|---|"]
        for m in dc.get("models", []):
            f = m["figures"]
            lines.append(f"| {m['name']} | {f['top1_rate']:.4f} | {f['first_token_kl_mean']:.2e} | "
                         f"{f['first_token_kl_max']:.2e} | {f['prefill_logits_rel_l2_max']:.2e} |")
    if report["llama_bench"]:
        lines += ["", "| llama-bench file | test | tokens | tok/s |", "|---|---|---|---|"]
        for r in report["llama_bench"]:
            tokens = r["n_prompt"] if r["test"] == "prefill" else r["n_gen"]
            lines.append(f"| {r['file']} | {r['test']} | {tokens} @ depth {r['n_depth']} | {fmt(r['tokens_per_s'])} |")
        for r in report["vs_llama_cpp"]:
            lines.append(f"\nOurs / llama.cpp ({r['ours']} / {r['llama_bench']}): prefill "
                         f"{fmt(r.get('prefill_ratio'), 2)}, decode {fmt(r.get('decode_ratio'), 2)} "
                         f"(llama-bench's decode at depth {r.get('decode_llama_depth', '–')}, ours after the prompt)")
    if report["profile"]:
        lines += ["", "Where the device time goes (RAGKV_CUDA_PROFILE; idle = between ops, launch gaps and host "
                  "work)", "", "| profile | section | phase | busy ms | idle ms | idle share | longest ops (share of busy) |",
                  "|---|---|---|---|---|---|---|"]
        for r in report["profile"]:
            top = ", ".join(f"{o['op']} {100 * o['share_of_phase']:.0f} %" for o in r["top_ops"])
            lines.append(f"| {r['profile']} | {r['section'] or '–'} | {r['phase']} | {fmt(r['busy_ms'])} | "
                         f"{fmt(r['idle_ms'])} | {fmt(None if r['idle_share'] is None else 100 * r['idle_share'])} % "
                         f"| {top} |")
    if report["missing"]:
        lines += ["", "Missing (the step failed or did not run): " + ", ".join(report["missing"])]
    return "\n".join(lines) + "\n"


def build_report(out):
    missing = []
    gpu, peak_tflops, peak_bw = chip(out)
    report = {"gpu": gpu, "peak_bf16_tflops": peak_tflops, "peak_hbm_bytes_per_s": peak_bw,
              "prefill": [], "reuse": [], "device_check": None, "profile": [], "llama_bench": [],
              "missing": missing}
    report["limits"] = load(out, "bench-device.json", missing)
    for name, label in PREFILL_RUNS:
        data, note = load_run(out, name, missing)
        for result in (data or {}).get("results", []):
            report["prefill"].append(prefill_row(label + note, result, peak_tflops, peak_bw, report["limits"]))
    for name, control, attention in (("bench-reuse.json", "on", "tensor cores"),
                                     ("bench-reuse-no-control.json", "off", "tensor cores"),
                                     ("bench-reuse-attn-f32.json", "on", "f32")):
        reuse, note = load_run(out, name, missing)
        if reuse and not reuse.get("load_control", control == "off"):
            control = "off"  # a CPU run, or a bench from before the controller's default
        for r in (reuse or {}).get("results", []):
            row = {k: r.get(k) for k in ("mode", "kv_tier", "ttft_ms_median", "ttft_ratio_vs_full",
                                         "first_token_matches_full", "first_logits_identical_to_full",
                                         "compute_fraction")}
            row["load_control"] = control
            row["attention"] = attention + note
            row["recomputed_segments"] = (r.get("load_control") or {}).get("recomputed_segments")
            report["reuse"].append(row)
    report["device_check"] = load(out, "device-check.json", missing)
    report["profile"] = profile_rows(out, missing)
    report["llama_bench"] = llama_bench_rows(out, missing)
    report["vs_llama_cpp"] = llama_ratios(out, report["llama_bench"], missing)
    return report


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpu-report.py OUT_DIR")
    out = sys.argv[1]
    report = build_report(out)
    with open(os.path.join(out, "gpu-report.json"), "w") as f:
        json.dump(report, f, indent=1)
    md = markdown(report)
    with open(os.path.join(out, "gpu-report.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
