// Exit codes (README "The CLI") and the one error type commands throw. main.ts prints a
// CliError as `error: <title>: <detail>` plus `hint: ...` on stderr and exits with its code.

import { printable } from '../client/terminal-text.js';

export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  auth: 3, // 401 / 403
  notFound: 4,
  conflict: 5,
  unreachable: 6,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export class CliError extends Error {
  readonly title: string;
  readonly detail: string;
  readonly hint?: string;

  constructor(
    readonly exitCode: ExitCode,
    title: string,
    detail: string,
    hint?: string,
    /** HTTP status when the error came from the API. */
    readonly status?: number,
  ) {
    // Titles and details are often the server's (problem+json, a refusal): nothing in them may act on the terminal.
    super(`${printable(title)}: ${printable(detail)}`);
    this.title = printable(title);
    this.detail = printable(detail);
    if (hint !== undefined) this.hint = printable(hint);
  }
}

/** The exit code for an API error status. */
export function exitCodeForStatus(status: number): ExitCode {
  if (status === 401 || status === 403) return EXIT.auth;
  if (status === 404) return EXIT.notFound;
  if (status === 409) return EXIT.conflict;
  if (status === 400 || status === 413 || status === 415) return EXIT.usage;
  return EXIT.error;
}
