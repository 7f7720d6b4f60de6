// Preload (`node --require`) that makes koffi unresolvable, as on an install without the optional peer.
"use strict";

const Module = require("node:module");

const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === "koffi" || request.startsWith("koffi/")) {
    const error = new Error(`Cannot find module '${request}'`);
    error.code = "MODULE_NOT_FOUND";
    throw error;
  }
  return resolveFilename.call(this, request, ...rest);
};
