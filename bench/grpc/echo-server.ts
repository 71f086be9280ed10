// The h2 scenario's gRPC origin, a process of its own (its CPU is read from /proc like every
// other's): `node echo-server.js` listens on 127.0.0.1 (h2c, a free port) and prints the port.
import * as grpc from '@grpc/grpc-js';
import { BENCH_SERVICE } from './service.js';

/** Download messages larger than this are refused (a bench bound, not a product's). */
const MAX_DOWNLOAD_MESSAGE = 4 << 20;

const server = new grpc.Server();
server.addService(BENCH_SERVICE as unknown as grpc.ServiceDefinition, {
  unary(call: grpc.ServerUnaryCall<Buffer, Buffer>, done: grpc.sendUnaryData<Buffer>) {
    done(null, call.request);
  },
  download(call: grpc.ServerWritableStream<Buffer, Buffer>) {
    const size = call.request.length >= 4 ? call.request.readUInt32BE(0) : 0;
    if (size < 8 || size > MAX_DOWNLOAD_MESSAGE) return void call.destroy(new Error('size out of range'));
    const body = Buffer.alloc(size, 0x5a);
    // Writes until grpc-js says its buffer is full, then waits for 'drain': flow control sets the pace.
    const pump = (): void => {
      while (!call.cancelled) {
        const m = Buffer.from(body);
        m.writeBigUInt64BE(process.hrtime.bigint(), 0);
        if (!call.write(m)) return void call.once('drain', pump);
      }
    };
    call.on('error', () => undefined);
    pump();
  },
  pingPong(call: grpc.ServerDuplexStream<Buffer, Buffer>) {
    call.on('data', (m: Buffer) => call.write(m));
    call.on('end', () => call.end());
    call.on('error', () => undefined);
  },
});
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(`bind: ${err.message}`);
    process.exit(1);
  }
  console.log(String(port));
});
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)));
