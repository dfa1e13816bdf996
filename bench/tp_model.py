#!/usr/bin/env python3
"""Paper model of --tp across hosts (issue 37), from the exchanges the code
makes per decode token (graph/forward_tp.c, f32 values: per GQA layer the
attention heads' outputs, o, the GLU output, down; MLA keeps its Q/K/V-side
gathers; MoE layers: one all-gather of the experts' output rows), and the
memory each host then holds (model/tp_slice.c: split matrices 1/N, the rest
replicated; GQA KV cache 1/N by KV head, MLA's latent cache replicated).

  t_token(N) = W_active / (N * B_mem) + sum over exchanges of ring_allgather(N, S)
  ring_allgather(N, S) = (N - 1) * alpha + (N - 1) / N * S / beta

Stated link and host: --alpha (one-way latency, default 5 us), --gbit (default
25 GbE), --mem-gbs (each host's achievable read bandwidth, default 100 GB/s).
Weights read per token: Q4_0-like 4.5 bits per parameter. One rank per host;
prints predicted decode tok/s for 1-8 hosts, f32 exchanges (what the code does
today) and int8 (the activation format the kernels consume, not done yet), and
GB of weights per host plus KV bytes per token per host (f16 cache)."""
import argparse


def llama70b():
    L, D, kv, F, V = 80, 8192, 1024, 28672, 128256
    per_layer = [D, D, F, D]  # heads' outputs, o, GLU output, down
    # replicated: the token embedding (untied: the classifier is split); KV: 8 heads, split
    return dict(name="70B-shaped (Llama-3 70B)", params=70.6e9, exch=per_layer * L + [V], repl=V * D,
                kv_split=L * 2 * kv * 2, kv_repl=0)


def deepseek_v3():
    L, dense, D, V = 61, 3, 7168, 129280
    attn = [1536 + 576, 128 * 192, D]  # q_a + kv_a, q_b, o  (MLA, absorbed)
    dense_ffn = [18432, D]  # GLU output, down
    moe = [256, 8 * D, 2048, D]  # router, expert rows (8 per token), shared GLU output, shared down
    ex = (attn + dense_ffn) * dense + (attn + moe) * (L - dense) + [V]
    # memory: all 671B parameters are held (experts placed 1/N); replicated: the embedding and
    # kv_b (file rows plus its f32 absorbed copy, 4 bytes a value: counted as 7.1 Q4 parameters)
    kv_b = 128 * 256 * 512
    return dict(name="DeepSeek-V3-shaped (37B active, EP for experts)", params=37.6e9, exch=ex, held=671e9,
                repl=V * D + L * kv_b * (1 + 32 / 4.5), kv_split=0, kv_repl=L * 576 * 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alpha", type=float, default=5e-6)
    ap.add_argument("--gbit", type=float, default=25.0)
    ap.add_argument("--mem-gbs", type=float, default=100.0)
    a = ap.parse_args()
    beta = a.gbit * 1e9 / 8
    print(f"link {a.gbit:g} Gbit/s, {a.alpha * 1e6:g} us one way; {a.mem_gbs:g} GB/s memory per host; Q4 weights")
    for m in (llama70b(), deepseek_v3()):
        w = m["params"] * 4.5 / 8
        n_ex, vals = len(m["exch"]), sum(m["exch"])
        print(f"\n{m['name']}: {w / 1e9:.1f} GB read per token, {n_ex} exchanges of {vals * 4 / 1e6:.1f} MB (f32) per token")
        print("hosts  compute ms  exch ms f32  tok/s f32  speedup  exch ms int8  tok/s int8  speedup"
              "  GB/host  KV B/token/host")
        base = None
        for n in range(1, 9):
            comp = w / (n * a.mem_gbs * 1e9)
            row = [n, comp * 1e3]
            for bpv in (4, 1):
                comm = sum((n - 1) * a.alpha + (n - 1) / n * s * bpv / beta for s in m["exch"]) if n > 1 else 0
                row += [comm * 1e3, 1 / (comp + comm)]
            base = base or (row[3], row[5])
            held, repl = m.get("held", m["params"]), m["repl"]
            gb = ((held - repl) / n + repl) * 4.5 / 8 / 1e9
            kvb = m["kv_split"] / n + m["kv_repl"]
            print(f"{n:5d}  {row[1]:10.1f}  {row[2]:11.1f}  {row[3]:9.2f}  {row[3] / base[0]:6.2f}x  {row[4]:12.1f}  "
                  f"{row[5]:10.2f}  {row[5] / base[1]:6.2f}x  {gb:7.1f}  {kvb:15.0f}")


if __name__ == "__main__":
    main()
