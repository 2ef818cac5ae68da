// The operator's `[settings]` table: a test sets `state.table` (key -> the host's string), and
// `state.json` when `getJson` should answer something else than the table as JSON.
export const state = { table: {}, json: undefined };
export const get = (key) => (Object.prototype.hasOwnProperty.call(state.table, key) ? state.table[key] : undefined);
export const getAll = () => Object.entries(state.table).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
export const getJson = () => JSON.stringify(state.json === undefined ? state.table : state.json);
