/** Base class of every error the SDK throws itself. */
export class SpaceError extends Error {
  override name = "SpaceError";
}

/** A non-2xx answer: `code` is the API's code (the HTTP status), `message`
 * its explanation, a plain sentence. */
export class APIError extends SpaceError {
  override name = "APIError";
  constructor(
    readonly code: number,
    message: string,
    readonly retryAfter?: string,
  ) {
    super(message);
  }
}

/** 404: no such object (or one of another project: they look the same). */
export class NotFoundError extends APIError {
  override name = "NotFoundError";
}

/** 409: the object is in a state that refuses the call. */
export class ConflictError extends APIError {
  override name = "ConflictError";
}

/** 429: a quota or the in-flight limit refused the call. */
export class RateLimitError extends APIError {
  override name = "RateLimitError";
}

/** An event stream could not be resumed (retries used up). */
export class StreamError extends SpaceError {
  override name = "StreamError";
}

// Proxies can answer with whole HTML pages: keep the message readable.
const MAX_MESSAGE = 500;

export async function errorFromResponse(resp: Response): Promise<APIError> {
  const text = await resp.text().catch(() => "");
  let code = resp.status;
  let message = "";
  try {
    const body = JSON.parse(text);
    if (body && typeof body === "object") {
      if (typeof body.message === "string") message = body.message;
      if (typeof body.code === "number") code = body.code;
    }
  } catch {
    // not JSON: the text itself, below
  }
  if (!message) {
    const t = text.trim();
    message = t && t.length <= MAX_MESSAGE ? t : `server answered ${resp.status}`;
  }
  const retryAfter = resp.headers.get("Retry-After") ?? undefined;
  const Cls = code === 404 ? NotFoundError : code === 409 ? ConflictError : code === 429 ? RateLimitError : APIError;
  return new Cls(code, message, retryAfter);
}
