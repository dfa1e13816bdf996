/* Loading a model for a backend (backend.h). */
#include "backend/backend.h"

di_code di_backend_load_model(const di_backend *be, const char *path, const di_model_opts *o, di_model **out,
                              di_status *st) {
  di_model *m = NULL;
  di_model_opts mo = o ? *o : (di_model_opts){0};
  if (mo.tp_size > 1) mo.use_mmap = true; /* the other ranks' rows stay unread on disk */
  di_code rc = di_model_load(path, &mo, &m, st);
  if (rc) {
    *out = NULL;
    return rc;
  }
  if (mo.tp_size > 1) di_model_tp_slice(m, mo.tp_rank, mo.tp_size);
  if ((rc = be->prepare_weights(m, mo.use_mmap, st))) {
    di_model_free(m);
    *out = NULL;
    return rc;
  }
  m->backend = be;
  *out = m;
  return DI_OK;
}

void di_backend_free_model(di_model *m) {
  if (!m) return;
  if (m->backend) m->backend->free_weights(m);
  di_model_free(m);
}
