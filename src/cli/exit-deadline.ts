// Leaving on Ctrl-C whatever the server does. A graceful stop sends its goodbye (Close frames,
// the WebSocket close) and lets the event loop empty; but a socket whose peer never closes its
// side (a frozen or overloaded server, a dial still in flight) kept burrow running for seconds
// after Ctrl-C. Once armed, the deadline ends the process when the event loop has not emptied
// by then; a second Ctrl-C ends it at once.

/** Ctrl-C to exit, at most (the summary line is printed before). */
export const EXIT_DEADLINE_MS = 1_000;
/** The part of it the goodbye may take before the summary prints. */
export const GOODBYE_MS = 500;

export const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

export class ExitDeadline {
  private timer: NodeJS.Timeout | null = null;
  /** The exit code the deadline leaves with (the run's, once known; else 0: a stop asked for). */
  code = 0;

  /** `beforeExit`: restores the terminal (cursor, screen) before a forced exit. */
  constructor(private readonly beforeExit: () => void) {}

  get armed(): boolean {
    return this.timer !== null;
  }

  arm(ms: number): void {
    if (this.timer) return;
    // unref: when everything has closed, the process leaves without waiting for it.
    this.timer = setTimeout(() => this.now(this.code), ms);
    this.timer.unref();
  }

  now(code: number): never {
    try {
      this.beforeExit();
    } catch {
      // leaving anyway
    }
    process.exit(code);
  }
}
