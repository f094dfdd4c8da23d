// server-everything's Streamable HTTP transport, bound to 127.0.0.1 (it listens on every
// interface by itself) on the port in $PORT (0: one the OS chooses). Prints
// "LISTENING <port>" on stderr once it accepts connections.
import http from "node:http";

const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  const done = rest.find((arg) => typeof arg === "function");
  return listen.call(this, Number(port), "127.0.0.1", () => {
    process.stderr.write(`LISTENING ${this.address().port}\n`);
    if (done) done();
  });
};
process.env.PORT ??= "0";
await import("@modelcontextprotocol/server-everything/dist/transports/streamableHttp.js");
