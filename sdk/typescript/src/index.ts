/**
 * @space-sandbox/sdk: the TypeScript SDK of space's own API (docs/api.md),
 * fetch-based, for Node 20 and browsers.
 */
export { Client, type ClientOptions } from "./client.js";
export { APIError, ConflictError, NotFoundError, RateLimitError, SpaceError, StreamError } from "./errors.js";
export { OPERATIONS, type Operation, type OperationId } from "./ops.js";
export { SSEParser, type LogEvent, type OutputEvent } from "./sse.js";
export type * from "./types.js";
export { VERSION } from "./version.js";
