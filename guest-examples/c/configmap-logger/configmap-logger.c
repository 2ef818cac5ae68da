// configmap-logger: the kubewasm reference handler in C.
//
// Logs one line per notification and answers according to the label `kubewasm.io/fail` of the
// object (for on-update: the new object): retry -> err(retry), fatal -> err(fatal),
// trap -> abort() traps the instance, anything else -> ok.
//
// The label `kubewasm.io/bench` (tests/benches/languages.rs) skips all of that: `noop` returns at
// once, `parse` validates the object's JSON with the parser below and returns; neither logs.
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
#define BENCH_LABEL "kubewasm.io/bench"

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

// ---- a small validating JSON parser ----------------------------------------------------------
// wasi-libc ships no JSON library. `parse` mode must do the work a handler reading the object
// would do, so this walks the whole document (RFC 8259 grammar, escapes and all) and counts its
// values; it builds no tree, which a C handler looking for a few fields would not build either.

// Nesting bound: the parser recurses per level and the wasm stack is small.
#define JSON_MAX_DEPTH 256

typedef struct {
  const uint8_t *p, *end;
  size_t values;
  int depth;
} json_parser_t;

static void json_ws(json_parser_t *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static bool json_lit(json_parser_t *j, const char *lit) {
  size_t n = strlen(lit);
  if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n) != 0) return false;
  j->p += n;
  return true;
}

static bool json_hex4(json_parser_t *j) {
  if (j->end - j->p < 4) return false;
  for (int i = 0; i < 4; i++, j->p++) {
    uint8_t c = *j->p;
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}

// After the opening quote; consumes the closing one. The host hands over valid UTF-8 (a WIT
// string), so only control characters and escapes need checking.
static bool json_string(json_parser_t *j) {
  while (j->p < j->end) {
    uint8_t c = *j->p++;
    if (c == '"') return true;
    if (c < 0x20) return false;
    if (c != '\\') continue;
    if (j->p >= j->end) return false;
    switch (*j->p++) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        break;
      case 'u':
        if (!json_hex4(j)) return false;
        break;
      default:
        return false;
    }
  }
  return false;
}

static bool json_digits(json_parser_t *j) {
  const uint8_t *start = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  return j->p > start;
}

static bool json_number(json_parser_t *j) {
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p < j->end && *j->p == '0') {
    j->p++;  // no leading zeros
  } else if (!json_digits(j)) {
    return false;
  }
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (!json_digits(j)) return false;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (!json_digits(j)) return false;
  }
  return true;
}

static bool json_value(json_parser_t *j);

// `open` already consumed; `close` is ']' or '}'. Objects want `"key": value` members.
static bool json_container(json_parser_t *j, uint8_t close) {
  if (++j->depth > JSON_MAX_DEPTH) return false;
  json_ws(j);
  if (j->p < j->end && *j->p == close) {
    j->p++;
    j->depth--;
    return true;
  }
  for (;;) {
    if (close == '}') {
      json_ws(j);
      if (j->p >= j->end || *j->p++ != '"' || !json_string(j)) return false;
      json_ws(j);
      if (j->p >= j->end || *j->p++ != ':') return false;
    }
    if (!json_value(j)) return false;
    json_ws(j);
    if (j->p >= j->end) return false;
    uint8_t c = *j->p++;
    if (c == close) break;
    if (c != ',') return false;
  }
  j->depth--;
  return true;
}

static bool json_value(json_parser_t *j) {
  json_ws(j);
  if (j->p >= j->end) return false;
  j->values++;
  switch (*j->p) {
    case '{': j->p++; return json_container(j, '}');
    case '[': j->p++; return json_container(j, ']');
    case '"': j->p++; return json_string(j);
    case 't': return json_lit(j, "true");
    case 'f': return json_lit(j, "false");
    case 'n': return json_lit(j, "null");
    default: return json_number(j);
  }
}

// Number of values in the document (>= 1), or 0 when it is not valid JSON.
static size_t json_count_values(const handler_string_t *doc) {
  json_parser_t j = {doc->ptr, doc->ptr + doc->len, 0, 0};
  if (!json_value(&j)) return 0;
  json_ws(&j);
  return j.p == j.end ? j.values : 0;
}

// Kept visible so the compiler cannot drop a parse whose count nobody reads.
volatile size_t json_values_seen;

// Handles the bench label of `obj` (the new object for on-update). Returns true when the call is
// a benchmark call: *ok and *err are then the call's result and `owned` has been freed.
static bool bench(const handler_object_t *obj, handler_handler_error_t *err, bool *ok,
                  handler_object_t *owned[], size_t n_owned) {
  const handler_string_t *mode = label(&obj->meta, BENCH_LABEL);
  if (!mode) return false;
  if (str_eq(mode, "noop")) {
    *ok = true;
  } else if (str_eq(mode, "parse")) {
    *ok = true;
    for (size_t i = 0; i < n_owned; i++) {
      size_t n = json_count_values(&owned[i]->json);
      json_values_seen += n;
      if (n == 0) *ok = false;
    }
    if (!*ok) {
      err->tag = KUBEWASM_HANDLER_TYPES_HANDLER_ERROR_FATAL;
      handler_string_dup(&err->val.fatal, "invalid JSON");
    }
  } else {
    return false;
  }
  for (size_t i = 0; i < n_owned; i++) handler_object_free(owned[i]);
  return true;
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
  bool ok;
  if (bench(obj, err, &ok, (handler_object_t *[]){obj}, 1)) return ok;
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "add " KEY_FMT " rv=%.*s init=%s", KEY_ARGS(m),
        STR_ARGS(m->resource_version), flag(is_in_initial_list));
  return outcome(obj, err, (handler_object_t *[]){obj}, 1);
}

bool exports_handler_on_update(handler_object_t *old, handler_object_t *new_, bool is_sync,
                               handler_handler_error_t *err) {
  bool ok;
  if (bench(new_, err, &ok, (handler_object_t *[]){old, new_}, 2)) return ok;
  const kubewasm_handler_types_object_meta_t *m = &new_->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "update " KEY_FMT " rv=%.*s->%.*s sync=%s", KEY_ARGS(m),
        STR_ARGS(old->meta.resource_version), STR_ARGS(m->resource_version), flag(is_sync));
  return outcome(new_, err, (handler_object_t *[]){old, new_}, 2);
}

bool exports_handler_on_delete(handler_object_t *obj, bool final_state_unknown,
                               handler_handler_error_t *err) {
  bool ok;
  if (bench(obj, err, &ok, (handler_object_t *[]){obj}, 1)) return ok;
  const kubewasm_handler_types_object_meta_t *m = &obj->meta;
  logf_(KUBEWASM_HANDLER_LOG_LEVEL_INFO, "delete " KEY_FMT " rv=%.*s final-state-unknown=%s",
        KEY_ARGS(m), STR_ARGS(m->resource_version), flag(final_state_unknown));
  return outcome(obj, err, (handler_object_t *[]){obj}, 1);
}
