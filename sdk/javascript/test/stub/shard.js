// The `shard` import: a test sets `state.by`, `state.ranges` and `state.owned` (the shard keys
// `owns` answers true for; undefined: every key, as when not sharded), and reads `state.asked`.
export const state = { by: 'none', ranges: [{ start: 0n, end: undefined }], owned: undefined, asked: [] };
export const by = () => state.by;
export const ranges = () => state.ranges.map((r) => ({ ...r }));
export const owns = (value) => {
  state.asked.push(value);
  return state.owned === undefined || state.owned.includes(value);
};
