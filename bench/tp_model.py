#!/usr/bin/env python3
"""Paper model of --tp across hosts (issue 37), from the exchanges the code
makes per decode token (graph/forward_tp.c: per GQA layer the attention heads'
outputs, o, the GLU output, down; per MLA layer q_a + kv_a, the heads'
outputs, o; MoE layers: the router, one all-gather of the experts' output
rows, the shared expert's GLU output and down; the classifier's columns), and
the memory each host then holds (model/tp_slice.c: split matrices 1/N, the
rest replicated; GQA KV cache 1/N by KV head, MLA's latent cache replicated).

  t_token(N) = W_active / (N * B_mem) + sum over exchanges of ring_allgather(N, S)
  ring_allgather(N, S) = (N - 1) * alpha + (N - 1) / N * S / beta

Stated link and host: --alpha (one-way latency, default 5 us), --gbit (default
25 GbE), --mem-gbs (each host's achievable read bandwidth, default 100 GB/s).
Weights read per token: Q4_0-like 4.5 bits per parameter. One rank per host;
prints predicted decode tok/s for 1-8 hosts with every exchange in f32 (the
code before the int8 gathers) and as the code does now (the gathers that feed
a matmul in its int8 activation blocks, 34 bytes per 32 values; the others,
which feed norms, residuals, expert sums and logits, in f32), and GB of
weights per host plus KV bytes per token per host (f16 cache)."""
import argparse


Q8 = 34 / 32  # bytes per value of an int8 activation block


def llama70b():
    L, D, kv, F, V = 80, 8192, 1024, 28672, 128256
    per_layer = [(D, Q8), (D, 4), (F, Q8), (D, 4)]  # heads' outputs, o, GLU output, down
    # replicated: the token embedding (untied: the classifier is split); KV: 8 heads, split
    return dict(name="70B-shaped (Llama-3 70B)", params=70.6e9, exch=per_layer * L + [(V, 4)], repl=V * D,
                kv_split=L * 2 * kv * 2, kv_repl=0)


def deepseek_v3():
    L, dense, D, V = 61, 3, 7168, 129280
    attn = [(1536 + 576, 4), (128 * 128, Q8), (D, 4)]  # q_a + kv_a, heads' outputs, o  (MLA, absorbed)
    dense_ffn = [(18432, Q8), (D, 4)]  # GLU output, down
    moe = [(256, 4), (8 * D, 4), (2048, Q8), (D, 4)]  # router, expert rows (8 per token), shared GLU, down
    ex = (attn + dense_ffn) * dense + (attn + moe) * (L - dense) + [(V, 4)]
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
        n_ex, vals = len(m["exch"]), sum(v for v, _ in m["exch"])
        now = sum(v * b for v, b in m["exch"])
        print(f"\n{m['name']}: {w / 1e9:.1f} GB read per token, {n_ex} exchanges per token: "
              f"{vals * 4 / 1e6:.1f} MB in f32, {now / 1e6:.1f} MB now")
        print("hosts  compute ms  exch ms f32  tok/s f32  speedup   exch ms now   tok/s now  speedup"
              "  GB/host  KV B/token/host")
        base = None
        for n in range(1, 9):
            comp = w / (n * a.mem_gbs * 1e9)
            row = [n, comp * 1e3]
            for f32 in (True, False):
                comm = sum((n - 1) * a.alpha + (n - 1) / n * s * (4 if f32 else b) / beta
                           for s, b in m["exch"]) if n > 1 else 0
                row += [comm * 1e3, 1 / (comp + comm)]
            base = base or (row[3], row[5])
            held, repl = m.get("held", m["params"]), m["repl"]
            gb = ((held - repl) / n + repl) * 4.5 / 8 / 1e9
            kvb = m["kv_split"] / n + m["kv_repl"]
            print(f"{n:5d}  {row[1]:10.1f}  {row[2]:11.1f}  {row[3]:9.2f}  {row[3] / base[0]:6.2f}x  {row[4]:12.1f}  "
                  f"{row[5]:10.2f}  {row[5] / base[1]:6.2f}x  {gb:7.1f}  {kvb:15.0f}")


if __name__ == "__main__":
    main()
