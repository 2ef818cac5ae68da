// kubewasm SDK for JavaScript handlers (world kubewasm:handler@0.2.0; componentize-js bundles
// it from relative imports). See sdk/javascript/README.md.
export { handler, subscription, permission } from './handler.js';
export { Watched } from './handler-core.js';
export { Retry, Fatal, Trap, ApiError, HttpError, Timeout, TooLarge, outcome } from './errors.js';
export { KubeObject, key } from './objects.js';
export * as kube from './kube.js';
export * as owner from './owner.js';
export * as events from './events.js';
export * as http from './http.js';
export * as log from './log.js';
export const version = '0.2.0';
