// The public API as the page uses it: the caller's token from sessionStorage, one error type, feature detection.
// The token is sent only in the Authorization header, never in a URL.

const BASE = new URL("../", window.location.href); // the page is served at <server>/ui/
const TOKEN_KEY = "pyramind.token";
const NAMESPACE_KEY = "pyramind.namespace";

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }

  /** The error in words, for the page. */
  describe() {
    const where = this.field ? ` (field: ${this.field})` : "";
    if (this.status === 0) return this.message;
    return `${this.message}${where} [${this.status} ${this.code}]`;
  }
}

export const session = {
  /** The token; "" for a server without auth; null when not signed in. */
  get token() { return sessionStorage.getItem(TOKEN_KEY); },
  get namespace() { return sessionStorage.getItem(NAMESPACE_KEY) || ""; },
  save(token, namespace) {
    sessionStorage.setItem(TOKEN_KEY, token);
    if (namespace) sessionStorage.setItem(NAMESPACE_KEY, namespace);
    else sessionStorage.removeItem(NAMESPACE_KEY);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(NAMESPACE_KEY);
  },
};

/**
 * Call the API. `query`: query-string values (empty ones dropped); `body`: a JSON body. The namespace the user
 * chose (static-token callers) goes in the query string of reads and in the body of writes.
 * Resolves to the parsed JSON (null for an empty body); rejects with ApiError.
 */
export async function api(method, path, { query = {}, body, token, namespace } = {}) {
  const url = new URL(path.replace(/^\//, ""), BASE);
  const ns = namespace ?? session.namespace;
  const params = { ...query };
  if (ns && (method === "GET" || body === undefined)) params.namespace = ns;
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, String(v));
  }
  const headers = { Accept: "application/json" };
  const bearer = token ?? session.token;
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let payload;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(ns && typeof body === "object" && !("namespace" in body) ? { ...body, namespace: ns } : body);
  }
  let resp;
  try {
    resp = await fetch(url, { method, headers, body: payload, cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, "network", `Cannot reach the Pyramind server at ${BASE.origin} (${err.message}).`);
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!resp.ok) {
    const e = data && data.error;
    const message = (e && e.message) || `The server answered ${resp.status} ${resp.statusText || ""}`.trim();
    throw new ApiError(resp.status, (e && e.code) || `http_${resp.status}`, message, e && e.field);
  }
  return data;
}

/**
 * Which optional endpoints this server has, from its public OpenAPI document: context assembly, core memory, pins,
 * standing instructions, a conversation's outline.
 * A missing document (or a path absent from it) hides the feature; a later 404 from the route hides it too.
 */
export async function detectFeatures() {
  const features = { context: false, core: false, pin: false, instructions: false, outline: false };
  try {
    const resp = await fetch(new URL("openapi.json", BASE), { cache: "no-store" });
    if (!resp.ok) return features;
    const paths = Object.keys((await resp.json()).paths || {});
    features.context = paths.includes("/context");
    features.core = paths.includes("/core");
    features.pin = paths.some((p) => p.startsWith("/memories/") && p.endsWith("/pin"));
    features.instructions = paths.includes("/instructions");
    features.outline = paths.some((p) => p.startsWith("/conversations/") && p.endsWith("/outline"));
  } catch {
    // no document: the optional panels stay hidden
  }
  return features;
}
