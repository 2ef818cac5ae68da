// configmap-logger: the kubewasm reference handler in C.
//
// Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
// object (for on-update: the new object): retry -> err(retry), fatal -> err(fatal),
// trap -> abort() traps the instance, anything else -> ok.
//
// Bindings (handler.h / handler.c) are generated from wit/ by `kubewasm-guest-tool bindgen`.
// Ownership rules of wit-bindgen's C bindings:
//   * export arguments are owned by the callee: free them (handler_object_free) before returning;
//   * returned values (describe's plugin-info, an error's message) must be heap-allocated
//     (handler_string_dup): the generated post-return code free()s them after the host copied them;
//   * strings are UTF-8 byte ranges, NOT NUL-terminated: print them with "%.*s".
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

#define FAIL_LABEL "kubewasm.io/fail"

static bool str_eq(const handler_string_t *s, const char *lit) {
  size_t n = strlen(lit);
  return s->len == n && memcmp(s->ptr, lit, n) == 0;
}

// Formats a message and sends it to the host's log at `level`.
__attribute__((format(printf, 2, 3))) static void logf_(kubewasm_handler_log_level_t level,
                                                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) abort();
  char *buf = malloc((size_t)n + 1);
  if (!buf) abort();
  va_start(ap, fmt);
  vsnprintf(buf, (size_t)n + 1, fmt, ap);
  va_end(ap);
  handler_string_t msg = {(uint8_t *)buf, (size_t)n};
  kubewasm_handler_log_log(level, &msg);  // the host copies the message; we keep ownership
  free(buf);
}

// "%.*s%s%.*s" arguments for `namespace/name`, or `name` for cluster-scoped objects.
#define KEY_FMT "%.*s%s%.*s"
#define KEY_ARGS(m)                                                                         \
  (m)->namespace_.is_some ? (int)(m)->namespace_.val.len : 0,                               \
      (m)->namespace_.is_some ? (const char *)(m)->namespace_.val.ptr : "",                 \
      (m)->namespace_.is_some ? "/" : "", (int)(m)->name.len, (const char *)(m)->name.ptr
#define STR_ARGS(s) (int)(s).len, (const char *)(s).ptr

static const char *flag(bool b) { return b ? "true" : "false"; }

// The value of label `name`, or NULL.
static const handler_string_t *label(const kubewasm_handler_types_object_meta_t *meta,
                                     const char *name) {
  for (size_t i = 0; i < meta->labels.len; i++) {
    if (str_eq(&meta->labels.ptr[i].f0, name)) return &meta->labels.ptr[i].f1;
  }
  return NULL;
}

// Decides the result from the fail label. Returns true for ok; false with *err set otherwise.
// Frees `owned` (the export's arguments) on every path that returns.
static bool outcome(const handler_object_t *obj, handler_handler_error_t *err,
                    handler_object_t *owned[], size_t n_owned) {
  const handler_string_t *fail = label(&obj->meta, FAIL_LABEL);
  bool ok = true;
  if (fail && str_eq(fail, "retry")) {
    err->tag = KUBEWASM_HANDLER_TYPES_HANDLER_ERROR_RETRY;
    handler_string_dup(&err->val.retry, FAIL_LABEL "=retry");
    ok = false;
  } else if (fail && str_eq(fail, "fatal")) {
    err->tag = KUBEWASM_HANDLER_TYPES_HANDLER_ERROR_FATAL;
    handler_string_dup(&err->val.fatal, FAIL_LABEL "=fatal");
    ok = false;
  } else if (fail && str_eq(fail, "trap")) {
    abort();  // traps the instance: the host discards it and counts a trap
  }
  for (size_t i = 0; i < n_owned; i++) handler_object_free(owned[i]);
  return ok;
}

void exports_handler_describe(handler_plugin_info_t *ret) {
  handler_string_dup(&ret->name, "configmap-logger");
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = calloc(1, sizeof(kubewasm_handler_types_subscription_t));
  if (!ret->subscriptions.ptr) abort();
  kubewasm_handler_types_subscription_t *s = &ret->subscriptions.ptr[0];
  handler_string_dup(&s->api_version, "v1");
  handler_string_dup(&s->kind, "ConfigMap");
  s->namespace_.is_some = false;
  s->label_selector.is_some = false;
  s->field_selector.is_some = false;
  s->resync_period_ms = 0;
}

bool exports_handler_on_add(handler_object_t *obj, bool is_in_initial_list,
                            handler_handler_error_t *err) {
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "add " KEY_FMT " rv=%.*s init=%s", KEY_ARGS(m),
        STR_ARGS(m->resource_version), flag(is_in_initial_list));
  return outcome(obj, err, (handler_object_t *[]){obj}, 1);
}

bool exports_handler_on_update(handler_object_t *old, handler_object_t *new_, bool is_sync,
                               handler_handler_error_t *err) {
  const kubewasm_handler_types_object_meta_t *m = &new_->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "update " KEY_FMT " rv=%.*s->%.*s sync=%s", KEY_ARGS(m),
        STR_ARGS(old->meta.resource_version), STR_ARGS(m->resource_version), flag(is_sync));
  return outcome(new_, err, (handler_object_t *[]){old, new_}, 2);
}

bool exports_handler_on_delete(handler_object_t *obj, bool final_state_unknown,
                               handler_handler_error_t *err) {
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "delete " KEY_FMT " rv=%.*s final-state-unknown=%s",
        KEY_ARGS(m), STR_ARGS(m->resource_version), flag(final_state_unknown));
  return outcome(obj, err, (handler_object_t *[]){obj}, 1);
}
