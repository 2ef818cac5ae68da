// Answers `state.objects` to every read, or throws `state.error`.
export const state = { objects: [], error: undefined };
export function get(apiVersion, kind, namespace, name) {
  if (state.error !== undefined) throw state.error;
  return state.objects.find((o) => o.meta.name === name && o.meta.namespace === namespace);
}
export function list() {
  if (state.error !== undefined) throw state.error;
  return state.objects;
}
