// Outbound HTTP over wasi:http, to the origins the plugin's grants list: a synchronous
// `fetch(url, init)` (exports are synchronous, so no Promise) answering a Response, or throwing
// HttpError (Timeout, TooLarge for the host's body cap) when no whole response came back. Every
// wasi:http resource is dropped before its parent, as wasi:http requires.
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingRequest, OutgoingBody, IncomingBody, RequestOptions, httpErrorCode } from 'wasi:http/types@0.2.12';
import { HttpError, Timeout, TooLarge } from './errors.js';

// wasi:io lets one blocking write carry at most 4096 bytes.
const CHUNK = 4096;
const METHODS = ['get', 'head', 'post', 'put', 'delete', 'connect', 'options', 'trace', 'patch'];

/** UTF-8 bytes of a string (QuickJS has no TextEncoder). */
export function utf8(text) {
  const bin = unescape(encodeURIComponent(text));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The string of UTF-8 bytes (invalid sequences read as Latin-1 rather than failing). */
export function text(bytes) {
  let bin = '';
  for (let i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
  try {
    return decodeURIComponent(escape(bin));
  } catch (_e) {
    return bin;
  }
}

/** A wasi:http error-code as the SDK's error (its payload stays out: it may hold data); its code
 * is the case as the WIT names it, lower-case (the tag `HTTP-request-denied` is
 * `http-request-denied`), as in the Python and Rust SDKs. */
export function httpError(what, code) {
  const name = String(code && code.tag !== undefined ? code.tag : code).toLowerCase();
  const Cls = name.endsWith('timeout') ? Timeout : name === 'http-response-body-size' ? TooLarge : HttpError;
  return new Cls(`${what}: ${name}`, name);
}

/** `scheme`, `authority` and `path` (with query) of an http(s) URL, or an HttpError. */
export function parseUrl(url) {
  const m = /^(https?):\/\/([^/?#]+)([^#]*)/.exec(url);
  if (!m) throw new HttpError(`not an http(s) URL: ${JSON.stringify(String(url).slice(0, 64))}`, 'http-request-uri-invalid');
  const path = m[3] || '/';
  return { https: m[1] === 'https', authority: m[2], path: path.startsWith('/') ? path : `/${path}` };
}

/** A whole response: `status`, `ok`, `headers` (lower-case names), `body` (bytes). */
export class Response {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  get ok() { return this.status >= 200 && this.status <= 299; }

  text() { return text(this.body); }

  json() { return JSON.parse(this.text()); }
}

/** Sends one request and reads the whole response. `init`: `method`, `headers` (an object),
 * `body` (a string or bytes), `timeout` (seconds: the connection, the first byte and each gap
 * between body bytes; the host's own limits apply too). */
export function fetch(url, { method = 'GET', headers = {}, body, timeout } = {}) {
  const u = parseUrl(url);
  const bytes = body === undefined ? undefined : typeof body === 'string' ? utf8(body) : body;
  const entries = Object.entries(headers).map(([k, v]) => [k.toLowerCase(), utf8(String(v))]);
  if (bytes) entries.push(['content-length', utf8(String(bytes.length))]);
  const req = new OutgoingRequest(Fields.fromList(entries));
  const m = method.toLowerCase();
  req.setMethod(METHODS.includes(m) ? { tag: m } : { tag: 'other', val: method });
  req.setScheme({ tag: u.https ? 'HTTPS' : 'HTTP' });
  req.setAuthority(u.authority);
  req.setPathWithQuery(u.path);
  const outgoing = req.body();
  if (bytes) {
    const stream = outgoing.write();
    for (let i = 0; i < bytes.length; i += CHUNK) stream.blockingWriteAndFlush(bytes.subarray(i, i + CHUNK));
    stream[Symbol.dispose]();
  }
  OutgoingBody.finish(outgoing, undefined);
  let options;
  if (timeout !== undefined) {
    options = new RequestOptions();
    const ns = BigInt(Math.round(timeout * 1e9));
    options.setConnectTimeout(ns);
    options.setFirstByteTimeout(ns);
    options.setBetweenBytesTimeout(ns);
  }
  const what = `${method.toUpperCase()} ${u.https ? 'https' : 'http'}://${u.authority}`;
  let future;
  try {
    future = handle(req, options);
  } catch (e) {
    throw httpError(what, e && e.payload !== undefined ? e.payload : e);
  }
  const pollable = future.subscribe();
  pollable.block();
  pollable[Symbol.dispose]();
  const got = future.get();
  future[Symbol.dispose]();
  if (!got || got.tag !== 'ok') throw new HttpError(`${what}: the response future gave no result`);
  if (got.val.tag !== 'ok') throw httpError(what, got.val.val);
  const response = got.val.val;
  const status = response.status();
  const fields = response.headers();
  const names = {};
  for (const [k, v] of fields.entries()) names[k] = text(v);
  fields[Symbol.dispose]();
  const incoming = response.consume();
  const stream = incoming.stream();
  const chunks = [];
  let size = 0;
  try {
    for (;;) {
      const chunk = stream.blockingRead(65536n);
      chunks.push(chunk);
      size += chunk.length;
    }
  } catch (e) {
    const err = e && e.payload !== undefined ? e.payload : e;
    if (!err || err.tag !== 'closed') {
      const code = err && err.tag === 'last-operation-failed' ? httpErrorCode(err.val) : undefined;
      throw code ? httpError(what, code) : new HttpError(`${what}: reading the body failed`);
    }
  } finally {
    stream[Symbol.dispose]();
    IncomingBody.finish(incoming)[Symbol.dispose]();
    response[Symbol.dispose]();
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return new Response(status, names, all);
}

/** GET `url`. */
export const get = (url, init = {}) => fetch(url, { ...init, method: 'GET' });

/** POSTs `value` as JSON (`content-type: application/json`). */
export const postJson = (url, value, init = {}) => fetch(url, {
  ...init, method: 'POST', body: JSON.stringify(value), headers: { 'content-type': 'application/json', ...(init.headers || {}) },
});
