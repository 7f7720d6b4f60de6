/**
 * The leak checks' worker: judges the windows a check sends (`judgeWindows`) and replies with the
 * verdicts, so that the training thread does not pause for the judgement.
 */
import { parentPort } from "node:worker_threads";
import { describeError } from "../describe-error.js";
import { type JudgeReply, type JudgeRequest, judgeWindows } from "./leak-judge.js";

const port = parentPort;
if (port === null) throw new Error("leak-judge-worker runs as a worker thread (the tracker starts it)");
port.on("message", (request: JudgeRequest) => {
  let reply: JudgeReply;
  try {
    reply = { id: request.id, verdicts: judgeWindows(request.input) };
  } catch (error) {
    reply = { id: request.id, error: describeError(error) };
  }
  port.postMessage(reply);
});
