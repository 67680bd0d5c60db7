// kinesis-mock (npm kinesis-local) on 127.0.0.1 only: the package listens on 0.0.0.0, hard-coded.
// Ports from KINESIS_MOCK_PLAIN_PORT / KINESIS_MOCK_TLS_PORT; it reads server.json (its TLS
// certificate) from its working directory, so it runs from its package folder.
"use strict";
const net = require("net");
const path = require("path");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === "object") {
    args[0] = { ...args[0], host: "127.0.0.1" };
  } else if (typeof args[1] === "string") {
    args[1] = "127.0.0.1";
  } else {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};

const pkg = path.join(__dirname, "node_modules", "kinesis-local");
process.chdir(pkg);
require(path.join(pkg, "main.js"));
