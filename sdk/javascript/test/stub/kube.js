// Records every call; a test sets `state.answer` (a value, or a thrown value via `state.error`).
export const calls = [];
export const state = { answer: undefined, error: undefined };
const call = (name) => (...args) => {
  calls.push([name, ...args]);
  if (state.error !== undefined) throw state.error;
  return state.answer;
};
export const get = call('get');
export const create = call('create');
export const apply = call('apply');
export const applyOutcome = call('applyOutcome');
export const patch = call('patch');
export const replace = call('replace');
const del = call('delete');
export { del as delete };
