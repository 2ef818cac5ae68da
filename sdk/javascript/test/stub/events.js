// Records emitted Events.
export const emitted = [];
export function emit(regarding, type, reason, action, note) {
  emitted.push({ regarding, type, reason, action, note });
}
