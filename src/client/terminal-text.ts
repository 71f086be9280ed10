// Text a server sends reaches a terminal: refusal and close messages (Refused, Closed, Fatal,
// a refused handshake's problem+json), the API's problem titles and details, names in listings.
// A server, a peer pretending to be one, or whoever wrote the text (a key name, a forged
// database notification) could put escape sequences in it that retitle the window, clear the
// screen, rewrite the lines above or forge output. Everything the CLI prints from a server
// passes through printable() first, once, where the text enters the CLI (TunnelRefused,
// CliError, table cells).

/**
 * Escape sequences, 7-bit (ESC …) and 8-bit (a C1 introducer): CSI with its parameters, the
 * OSC / DCS / SOS / PM / APC strings to their terminator, and two-byte escapes.
 */
const ESCAPE_SEQUENCE =
  // eslint-disable-next-line no-control-regex
  /(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x9c|\x1b\\)?|\x1b[ -/]*[0-~]?/g;
/** Line breaks and tabs become one space: a message stays on its line. */
const BREAKS = /[\t\n\v\f\r\u2028\u2029\x85]+/g;
/** Every other C0 and C1 control (8-bit CSI and OSC included), DEL, and the bidirectional overrides that reorder what is shown. */
// eslint-disable-next-line no-control-regex
const CONTROLS = /[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g;

/** `text` without anything a terminal would act on. */
export function printable(text: string): string {
  return text.replace(ESCAPE_SEQUENCE, '').replace(BREAKS, ' ').replace(CONTROLS, '');
}
