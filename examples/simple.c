/* The smallest DeepInfer program: load a model, submit two requests, step
 * the engine on this thread until both finish, print the streamed text.
 *
 *   build/simple MODEL.gguf "Once upon a time"
 */
#include <deepinfer.h>
#include <stdio.h>
#include <string.h>

static void on_event(const di_event *ev, void *user) {
  const char *tag = user;
  if (ev->text_len) printf("[%s] %.*s\n", tag, (int)ev->text_len, ev->text);
  if (ev->finish == DI_FINISH_ERROR) fprintf(stderr, "[%s] error: %s\n", tag, ev->error);
  else if (ev->finish != DI_FINISH_NONE)
    printf("[%s] done: %d prompt tokens (%d cached), %d generated\n", tag, ev->prompt_tokens, ev->cached_tokens,
           ev->completion_tokens);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]);
    return 2;
  }
  di_engine_opts o;
  di_engine_opts_default(&o);
  o.model_path = argv[1];
  o.threads = 2;
  di_engine *e = NULL;
  char err[512];
  if (di_engine_create(&o, &e, err, sizeof err) != DI_OK) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  di_request_params p;
  di_request_params_default(&p);
  p.prompt_text = argv[2];
  p.prompt_text_len = strlen(argv[2]);
  p.max_tokens = 32;
  p.cb = on_event;

  p.user = "greedy"; /* temperature 0: deterministic */
  if (di_engine_submit(e, &p, NULL, err, sizeof err) != DI_OK) fprintf(stderr, "greedy: %s\n", err);

  p.user = "sampled";
  p.sampling.temperature = 0.8f;
  p.sampling.top_p = 0.95f;
  p.sampling.seed = 42; /* same seed, same text, whatever else is running */
  const char *stop[] = {"\n"};
  p.stop = stop;
  p.n_stop = 1;
  if (di_engine_submit(e, &p, NULL, err, sizeof err) != DI_OK) fprintf(stderr, "sampled: %s\n", err);

  while (di_engine_step(e) > 0) {
  }
  di_engine_stats s;
  di_engine_stats_get(e, &s);
  printf("%llu requests, %llu tokens generated in %llu steps\n", (unsigned long long)s.finished,
         (unsigned long long)s.generated_tokens, (unsigned long long)s.steps);
  di_engine_destroy(e);
  return 0;
}
