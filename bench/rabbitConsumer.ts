/**
 * The RabbitMQ consumer of the remote-and-durable comparison, run as its own process by
 * `ingressRemote.ts`: `QUEUE=<name> MESSAGES=<n> WINDOW=<prefetch> node --import tsx bench/rabbitConsumer.ts`.
 * Consumes the durable queue with manual acks (one `ack` with `allUpTo` every 100 messages and at
 * the last), prints `LISTENING 0` once consuming (the line the bench waits for; it listens on no
 * port), then `DONE <peak RSS MiB> <CPU ms>` once it has received `MESSAGES`; exits when stdin closes.
 */
import * as Amqp from "amqplib"

const AckEvery = 100
const messages = Number(process.env.MESSAGES)
const queue = process.env.QUEUE ?? "bench"

process.stdin.on("data", () => {})
process.stdin.on("end", () => process.exit(0))

const main = async () => {
  const connection = await Amqp.connect(process.env.RABBITMQ_URL ?? "amqp://guest:guest@127.0.0.1:5672")
  const channel = await connection.createChannel()
  await channel.assertQueue(queue, { durable: true })
  await channel.prefetch(Number(process.env.WINDOW ?? 1000))
  let received = 0
  await channel.consume(queue, (message) => {
    if (message === null) return
    JSON.parse(message.content.toString("utf8"))
    received++
    if (received % AckEvery === 0 || received === messages) channel.ack(message, true)
    if (received === messages) {
      const cpu = process.cpuUsage()
      process.stdout.write(`DONE ${process.resourceUsage().maxRSS / 1024} ${(cpu.user + cpu.system) / 1000}\n`)
    }
  }, { noAck: false })
  process.stdout.write("LISTENING 0\n")
}

main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
