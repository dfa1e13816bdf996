/* MoE routing, the CPU backend's di_backend.moe_route: one token's expert
 * choice from its router logits (softmax or sigmoid scores, the noaux_tc
 * selection bias, group-limited selection, top-k). */
#include "backend/cpu/route.h"

#include <math.h>
#include <stdbool.h>

void di_cpu_moe_route(const di_hparams *hp, const float *logits, const float *sel_bias, int32_t *ids, float *w) {
  enum { MAXE = DI_MOE_MAX_EXPERTS };
  const int E = hp->n_expert, K = hp->n_expert_used;
  float s[MAXE], c[MAXE];
  if (hp->moe_score == DI_MOE_SOFTMAX) {
    float mx = logits[0];
    for (int e = 1; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp((double)logits[e] - mx);
    for (int e = 0; e < E; e++) s[e] = (float)(exp((double)logits[e] - mx) / sum);
  } else {
    for (int e = 0; e < E; e++) s[e] = (float)(1.0 / (1.0 + exp(-(double)logits[e])));
  }
  /* selection scores: bias-corrected under noaux_tc (the bias never weights) */
  for (int e = 0; e < E; e++) c[e] = sel_bias ? s[e] + sel_bias[e] : s[e];
  if (hp->n_group > 1 && hp->moe_topk != DI_MOE_GREEDY) {
    const int G = hp->n_group, per = E / G;
    float gs[MAXE];
    for (int g = 0; g < G; g++) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; i++) {
        float v = c[g * per + i];
        if (v > b1) b2 = b1, b1 = v;
        else if (v > b2) b2 = v;
      }
      /* noaux_tc: the sum of the group's two best; group_limited_greedy: its best */
      gs[g] = hp->moe_topk == DI_MOE_NOAUX_TC ? b1 + b2 : b1;
    }
    bool keep[MAXE] = {false};
    for (int k = 0; k < hp->topk_group; k++) {
      int best = -1;
      for (int g = 0; g < G; g++)
        if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
      keep[best] = true;
    }
    for (int e = 0; e < E; e++)
      if (!keep[e / per]) c[e] = -INFINITY;
  }
  bool taken[MAXE] = {false};
  double sum = 0;
  for (int k = 0; k < K; k++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || c[e] > c[best])) best = e;
    taken[best] = true;
    ids[k] = best;
    w[k] = s[best];
    sum += s[best];
  }
  for (int k = 0; k < K; k++) {
    float v = hp->moe_norm_topk ? (float)(w[k] / sum) : w[k];
    w[k] = v * hp->moe_scale;
  }
  /* ascending expert ids: the order each token's sum runs in */
  for (int i = 1; i < K; i++)
    for (int j = i; j > 0 && ids[j] < ids[j - 1]; j--) {
      int32_t ti = ids[j];
      ids[j] = ids[j - 1], ids[j - 1] = ti;
      float tw = w[j];
      w[j] = w[j - 1], w[j - 1] = tw;
    }
}
