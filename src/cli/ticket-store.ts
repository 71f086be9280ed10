import { loadConfig, sameServer, saveConfig, type Target } from './config.js';

// The control connection's resumption ticket (src/auth/resume-ticket.ts), kept in the context
// the key came from: after a burrowd restart, a `burrow` that was restarted too presents it and
// is taken back without an argon2 verification of its key, instead of waiting behind everyone
// else's. Only a context whose own key is the one in use keeps one (a key from --token or
// BURROW_TOKEN has no context to keep it in). Saving is best effort: a config file that cannot
// be written costs the next start a verification, never the run.

/** Saved at most this often: a connection that flaps would otherwise rewrite the file each second. */
const SAVE_EVERY_MS = 60_000;

/** The context `target` takes its key from, if that is where its key came from. */
function ownContext(target: Target): string | null {
  if (!target.contextName || !target.token) return null;
  const ctx = loadConfig().contexts[target.contextName];
  return ctx && ctx.token === target.token && sameServer(ctx.server, target.server) ? target.contextName : null;
}

/** The ticket kept for `target`'s key, or null. */
export function storedTicket(target: Target): string | null {
  try {
    const name = ownContext(target);
    return name ? loadConfig().contexts[name]?.resume ?? null : null;
  } catch {
    return null;
  }
}

/** Saves each new ticket into `target`'s context (the first at once, then at most once a minute). */
export function ticketKeeper(target: Target): (ticket: string) => void {
  let lastSaveMs = 0;
  let pending: string | null = null;
  let timer: NodeJS.Timeout | null = null;
  const save = (): void => {
    timer = null;
    const ticket = pending;
    pending = null;
    if (ticket === null) return;
    lastSaveMs = Date.now();
    try {
      const name = ownContext(target);
      if (!name) return;
      const cfg = loadConfig();
      const ctx = cfg.contexts[name];
      if (!ctx || ctx.resume === ticket) return;
      ctx.resume = ticket;
      saveConfig(cfg);
    } catch {
      /* best effort: see above */
    }
  };
  return (ticket) => {
    pending = ticket;
    if (timer) return;
    const waitMs = lastSaveMs + SAVE_EVERY_MS - Date.now();
    if (waitMs <= 0) return save();
    timer = setTimeout(save, waitMs);
    timer.unref();
  };
}
