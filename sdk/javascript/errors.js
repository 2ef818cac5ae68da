// How a handler fails: the errors the SDK throws and the ones a handler throws to choose between
// the host's `retry` (redeliver with backoff) and `fatal` (log, never redeliver).

/** Throw to have the notification redelivered later: the failure may heal by itself. */
export class Retry extends Error {}

/** Throw when redelivering cannot help (bad input, a refused request): logged, not retried. */
export class Fatal extends Error {}

/** A Kubernetes call the API server (or the host's grants, 403) refused. Uncaught, it becomes
 * `retry` when the code may heal (409, 429, 5xx) and `fatal` otherwise. */
export class ApiError extends Error {
  constructor(what, code, reason, message) {
    super(`${what}: ${code} ${reason}: ${message}`);
    this.code = code;
    this.reason = reason;
    this.detail = message;
  }

  /** Whether the same call may succeed later: conflicts, throttling and server errors. */
  get retryable() {
    return this.code === 409 || this.code === 429 || this.code >= 500;
  }
}

/** An outbound request that got no whole response (denied by the grants, refused, reset);
 * `code` is the wasi:http error-code case as the WIT names it, lower-case, e.g.
 * `http-request-denied` (the binding's tag is `HTTP-request-denied`). */
export class HttpError extends Error {
  constructor(message, code = '') {
    super(message);
    this.code = code;
  }
}

/** The request ran past its timeout or the host's (connection, first byte, body). */
export class Timeout extends HttpError {}

/** The response body was larger than the host's cap for one response. */
export class TooLarge extends HttpError {}

/** The handler-error `e` becomes when it escapes a handler: `Retry`/`Fatal` as named, `ApiError`
 * by its code, anything else (a bug, an odd object) `retry` with its message. */
export function outcome(e) {
  if (e instanceof Fatal) return { tag: 'fatal', val: e.message };
  if (e instanceof Retry) return { tag: 'retry', val: e.message };
  if (e instanceof ApiError) return { tag: e.retryable ? 'retry' : 'fatal', val: e.message };
  const name = e && e.name ? e.name : 'Error';
  return { tag: 'retry', val: `${name}: ${e && e.message !== undefined ? e.message : String(e)}` };
}

/** Throw to make the instance trap on purpose (the host discards it and counts a trap): the
 * handler layer lets only this through. For tests of the host's trap handling, such as the
 * configmap-logger's `kubewasm.io/fail=trap`; a handler never needs it. */
export class Trap extends Error {}

/** A setting (`settings.get`/`require`) that is missing or not of the type asked for: a `Fatal`,
 * as redelivering cannot change the settings. `key` names it, `expected` says what was asked
 * (`an integer`), `got` is the host's string (undefined: not set). */
export class SettingError extends Fatal {
  constructor(key, expected, got, detail) {
    let message;
    if (detail !== undefined) message = `setting "${key}": ${detail}`;
    else if (got === undefined) message = `setting "${key}": missing, expected ${expected}`;
    else message = `setting "${key}": expected ${expected}, got ${shown(got)}`;
    super(message);
    this.key = key;
    this.expected = expected;
    this.got = got;
  }
}

/** The host's string for a setting as an error message quotes it (cut at 60 characters). */
export function shown(text) {
  return JSON.stringify(text.length > 60 ? `${text.slice(0, 57)}...` : text);
}
