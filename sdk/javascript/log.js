// Logging through the host's log pipeline (tagged with the plugin's name, rate limited). Log
// what happened and to which object, never object content.
import { log as hostLog } from 'kubewasm:handler/log@0.2.0';

export const trace = (message) => hostLog('trace', message);
export const debug = (message) => hostLog('debug', message);
export const info = (message) => hostLog('info', message);
export const warn = (message) => hostLog('warn', message);
export const error = (message) => hostLog('error', message);
