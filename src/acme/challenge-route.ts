import type { Sql } from '../db/sql.js';
import type { RequestHead } from '../protocol/http1-parser.js';
import type { VisitorResponse } from '../edge/visitor-response.js';
import { challengeAnswer } from '../db/acme.js';

// GET /.well-known/acme-challenge/<token> on --http-port: the key authorization of a pending
// HTTP-01 challenge, read from the database so every node answers for every node's orders.

const PREFIX = '/.well-known/acme-challenge/';

export function isChallengeRequest(head: RequestHead): boolean {
  return head.target.startsWith(PREFIX);
}

export function answerChallenge(sql: Sql, head: RequestHead, res: VisitorResponse): void {
  const token = head.target.slice(PREFIX.length);
  challengeAnswer(sql, token).then(
    (answer) => {
      if (answer === null) return res.reply(404, { 'content-type': 'text/plain; charset=utf-8' }, 'no such ACME challenge\n');
      res.reply(200, { 'content-type': 'application/octet-stream' }, answer);
    },
    () => res.reply(503, { 'content-type': 'text/plain; charset=utf-8', 'retry-after': '2' }, 'the database is unreachable\n'),
  );
}
