/**
 * The leak analysis's judge worker (`leak-judges.ts`): judges each rank it is sent and replies with
 * its verdicts, or that judging threw (the analysis's thread then judges that rank itself).
 */
import { parentPort } from "node:worker_threads";
import { judgeRetention, unpackRetention } from "@stormlog/phases/internal";
import type { JudgeReply, JudgeRequest } from "./leak-judges.js";

const port = parentPort;
if (port === null) throw new Error("judge-worker runs as a worker thread (the analysis starts it)");

port.on("message", ({ id, packed }: JudgeRequest) => {
  let reply: JudgeReply;
  try {
    const { occurrences, input } = unpackRetention(packed);
    reply = { id, verdicts: [...judgeRetention(occurrences, input)] };
  } catch {
    reply = { id, failed: true };
  }
  port.postMessage(reply);
});
