import net from 'node:net';

// A local service on ::1 only, reached through the name `localhost`. It cannot listen on port
// 0: another test's service may hold the same port number on 127.0.0.1 (the two families have
// separate ports), and `localhost` would reach that one instead. So the port is one below the
// ephemeral range (and outside the test servers' TCP tunnel range, 20000-29999) that is free on
// 127.0.0.1 too.

function tryListen(s: net.Server, port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const failed = (): void => resolve(false);
    s.once('error', failed).listen(port, host, () => {
      s.off('error', failed);
      resolve(true);
    });
  });
}

async function freeOnIpv4(): Promise<number> {
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * 10_000);
    const probe = net.createServer();
    if (!(await tryListen(probe, port, '127.0.0.1'))) continue;
    await new Promise((r) => probe.close(r));
    return port;
  }
}

/** Makes `server` listen on [::1]:port, with that port free on 127.0.0.1; resolves to the port. */
export async function listenIpv6Only(server: net.Server): Promise<number> {
  for (;;) {
    const port = await freeOnIpv4();
    if (await tryListen(server, port, '::1')) return port;
  }
}
