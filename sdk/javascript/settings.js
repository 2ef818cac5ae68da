// The operator's settings: the `[settings]` table of the plugin's manifest
// (kubewasm:handler@0.3.0). Imported on its own (`import * as settings from './sdk/settings.js'`),
// not through index.js: it imports `kubewasm:handler/settings@0.3.0`, which a component built
// against 0.2.0 (and so index.js) must not.
//
//   settings.get('replicas', 'integer', 2)   // typed, with a default when the key is absent
//   settings.require('image')                // SettingError when absent
//   settings.all()                           // { key: the host's string }
//   settings.json()                          // the whole table, decoded
//
// The host gives every value as a string: a TOML string as its text, an integer, float or
// boolean as its TOML spelling (`3`, `0.5`, `true`), an array or table as JSON. `get` and
// `require` turn that string into the `type` asked for: 'string' (the text as it is),
// 'integer', 'number' (an integer too), 'boolean' (`true`/`false`), 'array', 'table', or a
// function taking the string (what it throws is the refusal; `oneOf('fast', 'safe')` makes one).
// A value that is not of the type throws `SettingError`, a `Fatal` naming the key and what was
// wrong: `setting "replicas": expected an integer, got "three"`. Thrown in `validateSettings`,
// that message is the host's reason to refuse the load; thrown in a callback, it is a `fatal`.
import * as host from 'kubewasm:handler/settings@0.3.0';
import { SettingError, shown } from './errors.js';

export { SettingError };

const INT = /^[+-]?\d(_?\d)*$/;
const FLOAT = /^[+-]?(\d(_?\d)*(\.\d(_?\d)*)?([eE][+-]?\d(_?\d)*)?|inf|nan)$/;

class NotOfType extends Error {}

function number(text) {
  if (!FLOAT.test(text)) throw new NotOfType();
  const t = text.replace(/_/g, '');
  if (/^[+-]?nan$/.test(t)) return NaN;
  if (/^[+-]?inf$/.test(t)) return t.startsWith('-') ? -Infinity : Infinity;
  return Number(t);
}

function jsonOf(isIt) {
  return (text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (_e) {
      throw new NotOfType();
    }
    if (!isIt(value)) throw new NotOfType();
    return value;
  };
}

// type -> [what the error says is expected, the parser]
const TYPES = {
  string: ['a string', (text) => text],
  integer: ['an integer', (text) => {
    if (!INT.test(text)) throw new NotOfType();
    const n = Number(text.replace(/_/g, ''));
    if (!Number.isSafeInteger(n)) throw new NotOfType();
    return n;
  }],
  number: ['a number', number],
  boolean: ['a boolean (true or false)', (text) => {
    if (text === 'true') return true;
    if (text === 'false') return false;
    throw new NotOfType();
  }],
  array: ['an array', jsonOf(Array.isArray)],
  table: ['a table', jsonOf((v) => v !== null && typeof v === 'object' && !Array.isArray(v))],
};

const expectedOf = (type) => (typeof type === 'function' ? type.expected || 'a valid value' : TYPES[type][0]);

/** `text` (the host's string for `key`) as `type`, or `SettingError`: the conversion `get` and
 * `require` make, for tests and for values read through `all()`. A function `type` may say what
 * it takes in an `expected` property (`one of "fast", "safe"`) for the message of an absent
 * `require`d key. */
export function parse(key, text, type = 'string') {
  if (typeof type === 'function') {
    try {
      return type(text);
    } catch (e) {
      const message = e && e.message ? e.message : '';
      throw new SettingError(key, expectedOf(type), text,
        message ? `${message}, got ${shown(text)}` : `expected ${expectedOf(type)}, got ${shown(text)}`);
    }
  }
  const known = Object.prototype.hasOwnProperty.call(TYPES, type) ? TYPES[type] : undefined;
  if (known === undefined) {
    throw new TypeError(`settings: type must be 'string', 'integer', 'number', 'boolean', 'array', 'table' or a function, not ${String(type)}`);
  }
  try {
    return known[1](text);
  } catch (e) {
    if (e instanceof NotOfType) throw new SettingError(key, known[0], text);
    throw e;
  }
}

/** A `type` for `get`/`require` taking one of `choices` (strings) and nothing else:
 * `settings.get('mode', oneOf('fast', 'safe'), 'safe')`. */
export function oneOf(...choices) {
  const expected = `one of ${choices.map((c) => JSON.stringify(c)).join(', ')}`;
  const choice = (text) => {
    if (!choices.includes(text)) throw new Error(`expected ${expected}`);
    return text;
  };
  choice.expected = expected;
  return choice;
}

/** The host's string for `key`, or undefined when the table does not have it. */
export function raw(key) {
  const text = host.get(key);
  return text === null ? undefined : text;
}

/** The setting `key` as `type`, or `fallback` when the table does not have it; `SettingError`
 * when the value is not of the type. */
export function get(key, type = 'string', fallback = undefined) {
  const text = raw(key);
  return text === undefined ? fallback : parse(key, text, type);
}

/** The setting `key` as `type`; `SettingError` when absent (`setting "image": missing, expected
 * a string`) or not of the type. */
export function require(key, type = 'string') {
  const text = raw(key);
  if (text === undefined) {
    if (typeof type !== 'function' && !Object.prototype.hasOwnProperty.call(TYPES, type)) parse(key, '', type);
    throw new SettingError(key, expectedOf(type));
  }
  return parse(key, text, type);
}

/** Every top-level setting as the host's string, by key (sorted). */
export function all() {
  return Object.fromEntries(host.getAll());
}

/** The whole table as one decoded JSON object (`{}` without settings): numbers, booleans, arrays
 * and tables as themselves, for a handler that takes its settings apart itself. */
export function json() {
  return JSON.parse(host.getJson());
}
