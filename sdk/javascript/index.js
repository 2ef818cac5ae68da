// kubewasm SDK for JavaScript handlers and controllers (kubewasm:handler@0.3.0 and 0.2.0;
// componentize-js bundles it from relative imports). See sdk/javascript/README.md.
//
// Everything here builds against 0.2.0 too (the guest examples and `kubewasm new` projects do),
// so the 0.3.0-only imports are modules of their own: the operator's settings
// (`import * as settings from './sdk/settings.js'`) and the replica's shard (`./sdk/shard.js`).
export { handler, subscription, permission } from './handler.js';
export { Watched } from './handler-core.js';
export { controller, watch, sameName, label, field, guest, done, requeueAfter, ObjectKey } from './controller.js';
export { Retry, Fatal, Trap, ApiError, HttpError, Timeout, TooLarge, SettingError, outcome } from './errors.js';
export { KubeObject, key } from './objects.js';
export * as kube from './kube.js';
export * as owner from './owner.js';
export * as events from './events.js';
export * as http from './http.js';
export * as log from './log.js';
export const version = '0.3.0';
