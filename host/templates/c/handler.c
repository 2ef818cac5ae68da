// {{name}}: a kubewasm handler (world kubewasm:handler@0.2.0) for {{api-version}} {{kind}}.
//
// Logs every call with the object's key and records a Normal Event `Observed` about each object it
// sees added (the one act it needs a grant for: `events = true` in {{name}}.toml).
//
// Bindings (handler.h / handler.c in build/bindings) are generated from wit/ at each build.
// Ownership rules of wit-bindgen's C bindings:
//   * export arguments belong to the callee: free them (handler_object_free) before returning;
//   * returned values (describe's plugin-info, an error's message) must be heap memory
//     (handler_string_dup): the generated post-return code free()s them;
//   * strings are UTF-8 byte ranges, NOT NUL-terminated: print them with "%.*s".
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handler.h"

// Formats a message (printf style) into heap memory; *len gets its length. Aborts (traps) when
// out of memory.
__attribute__((format(printf, 2, 3))) static char *format(size_t *len, const char *fmt, ...) {
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
  *len = (size_t)n;
  return buf;
}

static void log_info(char *buf, size_t len) {
  handler_string_t msg = {(uint8_t *)buf, len};
  kubewasm_handler_log_log(KUBEWASM_HANDLER_LOG_LEVEL_INFO, &msg);  // the host copies it
}

// "%.*s%s%.*s" arguments for `namespace/name`, or `name` for cluster-scoped objects.
#define KEY_FMT "%.*s%s%.*s"
#define KEY_ARGS(m)                                                         \
  (m)->namespace_.is_some ? (int)(m)->namespace_.val.len : 0,               \
      (m)->namespace_.is_some ? (const char *)(m)->namespace_.val.ptr : "", \
      (m)->namespace_.is_some ? "/" : "", (int)(m)->name.len, (const char *)(m)->name.ptr

static const char *flag(bool b) { return b ? "true" : "false"; }

void exports_handler_describe(handler_plugin_info_t *ret) {
  memset(ret, 0, sizeof(*ret));  // options none, lists empty, resync 0
  handler_string_dup(&ret->name, "{{name}}");
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = calloc(1, sizeof(kubewasm_handler_types_subscription_t));
  if (!ret->subscriptions.ptr) abort();
  kubewasm_handler_types_subscription_t *s = &ret->subscriptions.ptr[0];
  handler_string_dup(&s->api_version, "{{api-version}}");
  handler_string_dup(&s->kind, "{{kind}}");
  // Asks for the `events` grant; without it the plugin is not loaded.
  ret->events = true;
}

// Returning true is `ok`; to fail, set err->tag = KUBEWASM_HANDLER_TYPES_HANDLER_ERROR_RETRY (or
// _FATAL), handler_string_dup(&err->val.retry, "why") and return false.
bool exports_handler_on_add(handler_object_t *obj, bool is_in_initial_list,
                            handler_handler_error_t *err) {
  (void)err;
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  size_t len;
  char *line = format(&len, "add " KEY_FMT " init=%s", KEY_ARGS(m), flag(is_in_initial_list));
  log_info(line, len);
  free(line);
  char *note = format(&len, "{{name}} saw " KEY_FMT, KEY_ARGS(m));
  handler_string_t reason, action, note_s = {(uint8_t *)note, len};
  handler_string_set(&reason, "Observed");
  handler_string_set(&action, "Observe");
  kubewasm_handler_events_emit(&obj->meta, KUBEWASM_HANDLER_EVENTS_EVENT_TYPE_NORMAL, &reason,
                               &action, &note_s);
  free(note);
  handler_object_free(obj);
  return true;
}

bool exports_handler_on_update(handler_object_t *old, handler_object_t *new_, bool is_sync,
                               handler_handler_error_t *err) {
  (void)err;
  const kubewasm_handler_types_object_meta_t *m = &new_->meta;
  size_t len;
  char *line = format(&len, "update " KEY_FMT " sync=%s", KEY_ARGS(m), flag(is_sync));
  log_info(line, len);
  free(line);
  handler_object_free(old);
  handler_object_free(new_);
  return true;
}

bool exports_handler_on_delete(handler_object_t *obj, bool final_state_unknown,
                               handler_handler_error_t *err) {
  (void)err;
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  size_t len;
  char *line =
      format(&len, "delete " KEY_FMT " final-state-unknown=%s", KEY_ARGS(m), flag(final_state_unknown));
  log_info(line, len);
  free(line);
  handler_object_free(obj);
  return true;
}

bool exports_handler_on_synced(handler_handler_error_t *err) {
  (void)err;
  char msg[] = "synced";
  log_info(msg, sizeof(msg) - 1);
  return true;
}
