import { Agent, fetch } from 'undici';
import { withDeadline } from '../helpers/deadline.js';

// API calls from a chosen loopback source address (127.0.0.2, 127.0.0.3, …: all of 127/8 is
// loopback), so one test process can look like many clients to the per-IP limiter.
const agents = new Map<string, Agent>();

function agentFor(localAddress: string): Agent {
  let a = agents.get(localAddress);
  if (!a) {
    a = new Agent({ localAddress, connections: 512 });
    agents.set(localAddress, a);
  }
  return a;
}

export interface Answer {
  status: number;
  retryAfter: string | null;
  detail: string;
}

/** GET /api/v1/me with `authorization` (undefined: no header) from `from`. */
export async function callFrom(baseUrl: string, from: string, authorization: string | undefined, ms = 30_000): Promise<Answer> {
  const headers: Record<string, string> = authorization === undefined ? {} : { authorization };
  const res = await withDeadline(fetch(`${baseUrl}/api/v1/me`, { headers, dispatcher: agentFor(from) }), ms, `GET /me from ${from}`);
  const text = await res.text();
  let detail = text;
  try {
    detail = (JSON.parse(text) as { detail?: string }).detail ?? text;
  } catch {
    /* not JSON */
  }
  return { status: res.status, retryAfter: res.headers.get('retry-after'), detail };
}

export async function closeAgents(): Promise<void> {
  await Promise.all([...agents.values()].map((a) => a.close()));
  agents.clear();
}


/** Counts the argon2 verifications main logged so far (debug line "argon2 verification"). */
export function verificationsIn(stderr: string): number {
  let n = 0;
  for (const line of stderr.split('\n')) if (line.includes('"argon2 verification"')) n++;
  return n;
}
