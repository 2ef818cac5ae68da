// Collects log lines as [level, message].
export const lines = [];
export function log(level, message) {
  lines.push([level, message]);
}
