// Webhooks end to end: signed deliveries to a real receiver, retries, replicas, dead letters.

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "gateway_fixture.hpp"

namespace relay::testing {
namespace {

json::object line_json(const std::string& line) {
  return json::parse(line).as_object();
}

class WebhookTest : public GatewayTest {
 protected:
  Env webhook_env(Env extra = {}) {
    Env env{{"RELAY_WEBHOOKS_SECRET", WebhookReceiver::kSecret},
            {"RELAY_WEBHOOKS_ALLOW_PRIVATE", "true"},  // the receiver is on loopback
            {"RELAY_WEBHOOKS_INITIAL_BACKOFF", "100ms"}};
    for (auto& [k, v] : extra) env[k] = v;
    return env;
  }
  std::string submit_with_callback(const std::string& callback) {
    auto r = submit("input", {}, {{"callback_url", callback}});
    EXPECT_EQ(r.status, 202) << r.body;
    return str(parse(r), "id");
  }
  // Whether every one of ids had its webhook delivered within timeout.
  bool all_delivered(const std::vector<std::string>& ids, std::chrono::seconds timeout) {
    return wait_until(
        [&] {
          return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) {
            return webhook_status(id) == "delivered";
          });
        },
        timeout);
  }
  std::string webhook_status(const std::string& id) {
    auto j = job(id);
    auto it = j.find("webhook");
    if (it == j.end() || !it->value().is_object()) return "";
    return str(it->value().as_object(), "status");
  }
};

TEST_F(WebhookTest, DeliveredSignedAndVerifiedIndependently) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  auto d = line_json(receiver.lines()[0]);
  EXPECT_TRUE(d.at("valid").as_bool()) << "signature checked by Python's hmac";
  EXPECT_EQ(
      str(d, "id"), "msg_" + [&] {
        std::string s;
        for (char c : id)
          if (c != '-') s += c;
        return s;
      }());
  auto body = d.at("body").as_object();
  EXPECT_EQ(str(body, "id"), id);
  EXPECT_EQ(str(body, "status"), "completed");
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 10s));
  EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 1);
}

// A callback host whose name server does not answer at delivery: the attempt fails after
// dns.timeout, not after getaddrinfo's retries, and is retried like one that could not connect
// (it used to be refused for good: any failed lookup read as "does not resolve"); another job's
// webhook meanwhile is delivered. The job is accepted by a first gateway whose name server
// answers, and delivered by a second whose name server hangs (faults/slow_dns.cpp).
TEST_F(WebhookTest, ACallbackHostThatDoesNotResolveInTimeIsRetried) {
  WebhookReceiver receiver;
  receiver.start();
  const std::string port = receiver.url().substr(receiver.url().rfind(':'));  // ":<port>/..."
  Env accepting = slow_dns_env(0);
  accepting.merge(webhook_env());
  start_gateway(accepting);
  const std::string slow = submit_with_callback("http://hook.slow.test" + port);
  const std::string healthy = submit_with_callback(receiver.url());
  gateway_.reset();
  Env hanging = slow_dns_env(20'000);
  hanging.merge(webhook_env({{"RELAY_DNS_TIMEOUT", "300ms"},
                             {"RELAY_WEBHOOKS_INITIAL_BACKOFF", "30s"},
                             {"RELAY_WEBHOOKS_CONCURRENCY", "1"}}));
  start_gateway(hanging);
  InferenceServer inference;
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "2"})->wait_exit(20s), 0);
  ASSERT_TRUE(wait_until([&] { return webhook_status(slow) == "retrying"; }, 10s))
      << webhook_status(slow) << "\n"
      << gateway_->log();
  auto w = job(slow).at("webhook").as_object();
  EXPECT_EQ(w.at("attempts").as_int64(), 1);
  EXPECT_EQ(str(w.at("last_attempt").as_object(), "error"),
            "callback_url host 'hook.slow.test' did not resolve within 300ms");
  // With one worker, the healthy delivery waited for the slow lookup at most dns.timeout.
  ASSERT_TRUE(wait_until([&] { return webhook_status(healthy) == "delivered"; }, 10s))
      << gateway_->log();
  EXPECT_EQ(receiver.lines().size(), 1u);
}

TEST_F(WebhookTest, FailingReceiverIsRetriedWithTheSameWebhookId) {
  WebhookReceiver receiver(/*fail_first=*/2);
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  auto lines = receiver.lines();
  ASSERT_EQ(lines.size(), 3u);
  std::set<std::string> ids;
  for (auto& l : lines) ids.insert(str(line_json(l), "id"));
  EXPECT_EQ(ids.size(), 1u) << "retries carry the same webhook-id";
  EXPECT_EQ(line_json(lines[0]).at("status").as_int64(), 500);
  EXPECT_EQ(line_json(lines[2]).at("status").as_int64(), 200);
  EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 3);
}

TEST_F(WebhookTest, ReceiverDownThenUpGetsTheWebhookOnRetry) {
  WebhookReceiver receiver;  // its port is chosen, but nothing listens yet
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "retrying"; }, 20s)) << gateway_->log();
  receiver.start();
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  ASSERT_EQ(receiver.lines().size(), 1u);
  EXPECT_TRUE(line_json(receiver.lines()[0]).at("valid").as_bool());
  EXPECT_GE(job(id).at("webhook").as_object().at("attempts").as_int64(), 2);
}

TEST_F(WebhookTest, TwoReplicasDeliverEachWebhookExactlyOnce) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env({{"RELAY_EVENTS_CONSUMER", "replica-a"}}));
  GatewayServer second(gateway_env(webhook_env({{"RELAY_EVENTS_CONSUMER", "replica-b"}})));
  InferenceServer inference;
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(submit_with_callback(receiver.url()));
  auto relay = start_relay(inference, {}, {"--max-jobs", "8"});
  ASSERT_EQ(relay->wait_exit(30s), 0);
  ASSERT_TRUE(all_delivered(ids, 30s));
  auto lines = receiver.lines();
  std::set<std::string> delivered;
  for (auto& l : lines) delivered.insert(str(line_json(l), "id"));
  EXPECT_EQ(lines.size(), 8u) << "one delivery per transition, across two replicas";
  EXPECT_EQ(delivered.size(), 8u);
  // Both replicas consumed events: the work was shared, not duplicated.
  EXPECT_NE(gateway_->log().find("\"job finished\""), std::string::npos);
}

TEST_F(WebhookTest, CallbackWithoutASecretIsRefused) {
  start_gateway();  // no webhooks.secret
  auto r = submit("x", {}, {{"callback_url", "http://example.com/hook"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_code(r), "webhooks_not_configured");
}

// A receiver that accepts connections and never answers (the kernel completes the handshake of
// a listening socket nobody accepts on) holds five deliveries; another tenant's webhook to a
// healthy receiver still goes out at once, not after the hanging ones time out.
TEST_F(WebhookTest, HangingReceiverDelaysOnlyItsOwnWebhooks) {
  const int hanging_port = free_port();
  int hanging = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(hanging_port));
  ASSERT_EQ(::bind(hanging, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(hanging, 64), 0);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_hanging{hanging};
  WebhookReceiver healthy;
  healthy.start();
  start_gateway(webhook_env({{"RELAY_WEBHOOKS_TIMEOUT", "60s"}}));
  InferenceServer inference;
  const std::string hanging_url = "http://127.0.0.1:" + std::to_string(hanging_port) + "/hook";
  for (int i = 0; i < 5; ++i) submit_with_callback(hanging_url);
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "5"})->wait_exit(30s), 0);
  // Give the sender time to take up the hanging deliveries (they hold their connections).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto id = submit_with_callback(healthy.url());
  ASSERT_EQ(start_relay(inference)->wait_exit(20s), 0);
  // Served promptly: one hanging receiver holds at most webhooks.per_host_concurrency workers.
  // (Before, one sender thread tried deliveries in turn: this waited for the 60 s timeouts.)
  EXPECT_TRUE(wait_until([&] { return healthy.lines().size() == 1; }, 3s)) << gateway_->log();
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 10s));
}

// One receiver, one delivery at a time (per_host_concurrency 1), thirty jobs ending at once:
// the claims beyond its share wait in memory or are put back in Redis, and every webhook is
// still delivered exactly once, at its first attempt — none lost from the waiting line, none
// sent twice, none counted as a failed attempt.
TEST_F(WebhookTest, AReceiverWithItsShareInHandGetsEveryWebhookOnceInTurn) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env({{"RELAY_WEBHOOKS_PER_HOST_CONCURRENCY", "1"},
                             {"RELAY_WEBHOOKS_PER_HOST_MAX_CONCURRENCY", "1"}}));
  InferenceServer inference;
  std::vector<std::string> ids;
  for (int i = 0; i < 30; ++i) ids.push_back(submit_with_callback(receiver.url()));
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "30"})->wait_exit(60s), 0);
  ASSERT_TRUE(all_delivered(ids, 60s)) << gateway_->log();
  auto lines = receiver.lines();
  std::set<std::string> delivered;
  for (auto& l : lines) delivered.insert(str(line_json(l), "id"));
  EXPECT_EQ(lines.size(), ids.size());
  EXPECT_EQ(delivered.size(), ids.size());
  for (auto& id : ids) EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 1);
  const auto metrics = http("GET", url("/metrics")).body;
  EXPECT_EQ(metric_value(metrics, "relay_webhook_attempts_total{outcome=\"delivered\"}"), 30);
  EXPECT_NE(metrics.find("relay_webhook_deferrals_total "), std::string::npos) << metrics;
}

// Four receivers at once, webhooks ending every way: two healthy, one failing its first three
// requests (tried again), one answering its first two 410 Gone (given up). The workers' outcomes
// are written together, whichever worker finds none being written taking all that ended
// meanwhile: every one still lands on its own job, once — a delivery per job, retries on the
// deliveries that failed and nowhere else, the given-up ones failed with nothing sent again.
TEST_F(WebhookTest, ManyReceiversAtOnceEachOutcomeOnItsOwnJob) {
  WebhookReceiver healthy_a, healthy_b, failing(/*fail_first=*/3), gone(2, 0, 0, /*status=*/410);
  for (auto* r : {&healthy_a, &healthy_b, &failing, &gone}) r->start();
  start_gateway(webhook_env());
  InferenceServer inference;
  constexpr int kEach = 6;
  std::map<std::string, std::vector<std::string>> ids;  // receiver's url -> its jobs
  for (int i = 0; i < kEach; ++i)
    for (auto* r : {&healthy_a, &healthy_b, &failing, &gone})
      ids[r->url()].push_back(submit_with_callback(r->url()));
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", std::to_string(4 * kEach)})->wait_exit(60s),
            0);
  ASSERT_TRUE(wait_until(
      [&] {
        for (auto& [url, jobs] : ids)
          for (auto& id : jobs)
            if (webhook_status(id) != "delivered" && webhook_status(id) != "failed") return false;
        return true;
      },
      60s))
      << gateway_->log();
  auto attempts = [&](const std::string& id) {
    return job(id).at("webhook").as_object().at("attempts").as_int64();
  };
  auto distinct = [](const WebhookReceiver& r) {
    std::set<std::string> out;
    for (auto& l : r.lines()) out.insert(str(line_json(l), "id"));
    return out.size();
  };
  for (auto* r : {&healthy_a, &healthy_b}) {
    EXPECT_EQ(r->lines().size(), static_cast<size_t>(kEach));
    EXPECT_EQ(distinct(*r), static_cast<size_t>(kEach));
    for (auto& id : ids[r->url()]) {
      EXPECT_EQ(webhook_status(id), "delivered") << id;
      EXPECT_EQ(attempts(id), 1) << id;
    }
  }
  std::int64_t failing_attempts = 0;
  for (auto& id : ids[failing.url()]) {
    EXPECT_EQ(webhook_status(id), "delivered") << id;
    failing_attempts += attempts(id);
  }
  EXPECT_EQ(failing_attempts, kEach + 3) << "each failed request counted on its own delivery";
  EXPECT_EQ(failing.lines().size(), static_cast<size_t>(kEach + 3));
  EXPECT_EQ(distinct(failing), static_cast<size_t>(kEach));
  int given_up = 0;
  for (auto& id : ids[gone.url()]) {
    given_up += webhook_status(id) == "failed";
    EXPECT_EQ(attempts(id), 1) << id << ": 410 is not tried again";
  }
  EXPECT_EQ(given_up, 2);
  EXPECT_EQ(gone.lines().size(), static_cast<size_t>(kEach));
  const auto metrics = http("GET", url("/metrics")).body;
  EXPECT_EQ(metric_value(metrics, "relay_webhook_attempts_total{outcome=\"delivered\"}"),
            4 * kEach - 2);
  EXPECT_EQ(metric_value(metrics, "relay_webhook_attempts_total{outcome=\"http_error\"}"), 5);
}

// The most requests a receiver had in progress at once, by its own count.
std::int64_t most_at_once(const WebhookReceiver& r) {
  std::int64_t most = 0;
  for (auto& l : r.lines()) most = std::max(most, line_json(l).at("in_flight").as_int64());
  return most;
}

// A receiver far away (each answer 150 ms late) that keeps up, with forty webhooks due at once:
// its share grows past webhooks.per_host_concurrency (2) towards per_host_max_concurrency (8),
// so it is not held to 2 per round trip. It was: ~13 webhooks a second for ever, whatever the
// backlog. Every webhook still goes once, at its first attempt.
TEST_F(WebhookTest, AFarReceiverThatKeepsUpIsGivenMoreAtOnce) {
  WebhookReceiver far(0, 0, 0, 500, /*delay_ms=*/150);
  far.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  std::vector<std::string> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(submit_with_callback(far.url()));
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "40"})->wait_exit(60s), 0);
  ASSERT_TRUE(wait_until([&] { return far.lines().size() >= ids.size(); }, 60s)) << gateway_->log();
  ASSERT_TRUE(all_delivered(ids, 20s));
  EXPECT_EQ(far.lines().size(), ids.size()) << "each once";
  for (auto& id : ids) EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 1);
  EXPECT_GT(most_at_once(far), 2) << "its share grew";
  EXPECT_LE(most_at_once(far), 8) << "within webhooks.per_host_max_concurrency";
}

// A receiver that fails every request (slowly: it is struggling) gets no more than
// webhooks.per_host_concurrency at once, however many of its webhooks wait; nor does one whose
// share may not grow (per_host_max_concurrency at or below per_host_concurrency).
TEST_F(WebhookTest, AStrugglingReceiverIsHeldToItsShare) {
  WebhookReceiver failing(/*fail_first=*/1'000'000, 0, 0, 503, /*delay_ms=*/100);
  WebhookReceiver pinned(0, 0, 0, 500, /*delay_ms=*/100);
  failing.start();
  pinned.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  for (int i = 0; i < 20; ++i) submit_with_callback(failing.url());
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "20"})->wait_exit(60s), 0);
  // Twice as many attempts as webhooks: every one failed at least once, most retried.
  ASSERT_TRUE(wait_until([&] { return failing.lines().size() >= 40; }, 60s)) << gateway_->log();
  EXPECT_LE(most_at_once(failing), 2);
  gateway_->stop();
  start_gateway(webhook_env({{"RELAY_WEBHOOKS_PER_HOST_MAX_CONCURRENCY", "1"}}));
  std::vector<std::string> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(submit_with_callback(pinned.url()));
  ASSERT_EQ(start_relay(inference, {}, {"--max-jobs", "12"})->wait_exit(60s), 0);
  ASSERT_TRUE(wait_until([&] { return pinned.lines().size() >= ids.size(); }, 60s))
      << gateway_->log();
  EXPECT_LE(most_at_once(pinned), 2);
}

TEST_F(WebhookTest, RetryAfterIsHonoured) {
  WebhookReceiver receiver(/*fail_first=*/1, /*port=*/0, /*retry_after=*/2);
  receiver.start();
  start_gateway(webhook_env());  // initial backoff 100 ms: Retry-After must win
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 30s))
      << gateway_->log();
  auto lines = receiver.lines();
  ASSERT_EQ(lines.size(), 2u);
  double gap = line_json(lines[1]).at("received_at").to_number<double>() -
               line_json(lines[0]).at("received_at").to_number<double>();
  EXPECT_GE(gap, 1.9) << "the second attempt waited for Retry-After";
}

// Standard Webhooks: 410 Gone says the endpoint is gone for good — no retry, and the delivery
// counts as given up (what the alert RelayWebhooksGivenUp watches).
TEST_F(WebhookTest, AReceiverAnswering410IsGivenUpAtOnce) {
  WebhookReceiver receiver(/*fail_first=*/100, /*port=*/0, /*retry_after=*/0, /*fail_status=*/410);
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "failed"; }, 30s)) << gateway_->log();
  EXPECT_EQ(job(id).at("webhook").as_object().at("attempts").as_int64(), 1);
  EXPECT_EQ(receiver.lines().size(), 1u);
  const auto m = http("GET", url("/metrics")).body;
  EXPECT_NE(m.find("relay_webhooks_given_up_total{reason=\"gone\"} 1\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("reason=\"expired\""), std::string::npos) << m;
}

// A receiver that keeps failing is tried until webhooks.max_age has passed, then given up.
TEST_F(WebhookTest, ADeliveryStillFailingAtMaxAgeIsGivenUp) {
  WebhookReceiver receiver(/*fail_first=*/100);
  receiver.start();
  start_gateway(webhook_env({{"RELAY_WEBHOOKS_MAX_AGE", "1s"}}));
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  auto relay = start_relay(inference);
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "failed"; }, 30s)) << gateway_->log();
  EXPECT_GE(job(id).at("webhook").as_object().at("attempts").as_int64(), 2) << "retried first";
  const auto m = http("GET", url("/metrics")).body;
  EXPECT_NE(m.find("relay_webhooks_given_up_total{reason=\"expired\"} 1\n"), std::string::npos)
      << m;
}

TEST_F(WebhookTest, DeadLetteredJobFiresItsWebhook) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env({{"RELAY_GC_MAX_REAP_ATTEMPTS", "1"}}));
  auto id = submit_with_callback(receiver.url());
  InferenceServer slow({.delay_ms = 30'000});
  auto doomed = start_relay(slow, {{"RELAY_LEASE_TTL", "600ms"}});
  ASSERT_TRUE(wait_until([&] { return str(job(id), "status") == "processing"; }, 20s));
  doomed->signal(SIGKILL);
  doomed->wait_exit(5s);
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 30s)) << gateway_->log();
  auto body = line_json(receiver.lines()[0]).at("body").as_object();
  EXPECT_EQ(str(body, "status"), "failed");
  EXPECT_EQ(str(body.at("error").as_object(), "code"), "dead_lettered");
}

TEST_F(WebhookTest, CompletionWhileTheGatewayIsDownIsDeliveredAfterRestart) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  InferenceServer inference;
  auto id = submit_with_callback(receiver.url());
  ASSERT_EQ(gateway_->stop(), 0);
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  EXPECT_TRUE(receiver.lines().empty());
  gateway_->start();
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  EXPECT_EQ(str(line_json(receiver.lines()[0]).at("body").as_object(), "id"), id);
}

TEST_F(WebhookTest, EventsADeadReplicaLeftUnacknowledgedAreClaimed) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  // Its completion consumer creates the consumer group, after the gateway listens: under load a
  // stop right away came first (the group was then made by the restarted gateway, but the read
  // below found none).
  ASSERT_TRUE(wait_until(
      [&] {
        auto groups = conn_.command({"EXISTS", keys_.events("m1")});
        if (redis::as_integer(groups.get()) == 0) return false;
        return conn_.command({"XINFO", "GROUPS", keys_.events("m1")})->elements > 0;
      },
      10s))
      << gateway_->log();
  ASSERT_EQ(gateway_->stop(), 0);
  // Its blocked read must not take the event (it did under load: pending under the gateway's
  // own consumer name, nothing left for the dead replica below; has_blocked_client()).
  ASSERT_TRUE(wait_until([&] { return !redis_.has_blocked_client(); }, 10s))
      << "Redis still holds the stopped gateway's blocked read";
  InferenceServer inference;
  // Submitted by hand (the gateway is down): the same record the gateway writes.
  auto id = [&] {
    JobRecord r;
    r.id = new_job_id();
    r.service_type = "echo";
    r.model = "m1";
    r.tenant = "default";
    r.input_key = input_object_key("echo", r.id);
    r.callback_url = receiver.url();
    r.created_at = parse_rfc3339("2026-11-30T00:00:00.000Z");
    std::filesystem::create_directories(files_.path() + "/echo/" + r.id);
    std::ofstream(files_.path() + "/" + r.input_key) << "input";
    store_.submit(r, false);
    return r.id;
  }();
  auto relay = start_relay(inference);
  ASSERT_EQ(relay->wait_exit(20s), 0);
  // A replica reads the event, then dies before acknowledging it.
  auto read = conn_.command({"XREADGROUP", "GROUP", "relay-gateway", "dead-replica", "COUNT", "10",
                             "STREAMS", keys_.events("m1"), ">"});
  ASSERT_EQ(read->type, REDIS_REPLY_ARRAY);
  gateway_->start();  // events.claim_idle is 1 s in these tests
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s)) << gateway_->log();
  EXPECT_EQ(str(line_json(receiver.lines()[0]).at("body").as_object(), "id"), id);
  ASSERT_TRUE(wait_until(
      [&] {
        return redis::as_integer(
                   conn_.command({"XPENDING", keys_.events("m1"), "relay-gateway"})->element[0]) ==
               0;
      },
      10s));
}

}  // namespace
}  // namespace relay::testing

namespace relay::testing {
namespace {

// webhook_events: a job that asks for started and progress webhooks gets them, each with its
// own webhook-id, beside the terminal one; the event is named in the body and a header.
TEST_F(WebhookTest, StartedAndProgressWebhooksWhenAsked) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  auto r =
      submit("input", {},
             {{"callback_url", receiver.url()}, {"webhook_events", "started,progress,terminal"}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = str(parse(r), "id");
  InferenceServer inference({.delay_ms = 2500, .progress_steps = 5});
  auto relay = start_relay(inference, {{"RELAY_RELAY_PROGRESS_INTERVAL", "50ms"},
                                       {"RELAY_RELAY_PROGRESS_WEBHOOK_INTERVAL", "1s"}});
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  // Every delivery made (none left due), the terminal one among them.
  ASSERT_TRUE(wait_until(
      [&] {
        bool completed = false;
        for (const auto& line : receiver.lines())
          completed = completed || str(line_json(line), "event") == "completed";
        return completed &&
               redis::as_integer(conn_.command({"ZCARD", keys_.webhooks_due("m1")}).get()) == 0;
      },
      20s))
      << gateway_->log();
  std::vector<std::string> events;
  std::set<std::string> ids;
  for (const auto& line : receiver.lines()) {
    auto d = line_json(line);
    EXPECT_TRUE(d.at("valid").as_bool());
    events.push_back(str(d, "event"));
    ids.insert(str(d, "id"));
    EXPECT_EQ(str(d.at("body").as_object(), "event"), str(d, "event"));
  }
  // Webhooks are not ordered (each is sent when due, concurrently): the body says the state.
  EXPECT_EQ(std::count(events.begin(), events.end(), "started"), 1);
  EXPECT_EQ(std::count(events.begin(), events.end(), "completed"), 1);
  // Progress webhooks are rate-limited: five reports in 2.5 s make two or three, not five.
  const auto progress = std::count(events.begin(), events.end(), "progress");
  EXPECT_GE(progress, 1);
  EXPECT_LE(progress, 3);
  EXPECT_EQ(ids.size(), events.size()) << "one webhook-id per delivery";
  // Only the terminal delivery stays with the job.
  ASSERT_TRUE(wait_until([&] { return webhook_status(id) == "delivered"; }, 10s));
  auto keys = conn_.command({"KEYS", "*webhook:*"});
  EXPECT_EQ(keys->elements, 1u);
}

// Without webhook_events a job has its terminal webhook only, however much it reports.
TEST_F(WebhookTest, ProgressMakesNoWebhookUnlessAsked) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  submit_with_callback(receiver.url());
  InferenceServer inference({.delay_ms = 1000, .progress_steps = 3});
  auto relay = start_relay(inference, {{"RELAY_RELAY_PROGRESS_INTERVAL", "50ms"},
                                       {"RELAY_RELAY_PROGRESS_WEBHOOK_INTERVAL", "1s"}});
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  ASSERT_TRUE(wait_until([&] { return receiver.lines().size() == 1; }, 20s));
  EXPECT_EQ(str(line_json(receiver.lines()[0]), "event"), "completed");
  EXPECT_TRUE(inference.saw("progress 3 204")) << inference.events();
}

// W3C Trace Context follows the job: the submission's trace is on the job, reaches the model
// and the webhook (each hop its own parent id), and names the job's log lines; the relay's
// stage timings land in the gateway's histograms.
TEST_F(WebhookTest, TheTraceFollowsTheJobAndTimingsBecomeMetrics) {
  WebhookReceiver receiver;
  receiver.start();
  start_gateway(webhook_env());
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  const std::string given = "00-" + trace + "-00f067aa0ba902b7-01";
  auto r = submit("input", {"traceparent: " + given, "tracestate: congo=t61rcWkgMzE"},
                  {{"callback_url", receiver.url()}});
  ASSERT_EQ(r.status, 202) << r.body;
  const std::string id = str(parse(r), "id");
  EXPECT_EQ(str(parse(r), "trace_id"), trace);
  // Without one, a job still gets a trace of its own; a malformed one is replaced.
  EXPECT_EQ(str(parse(submit("x")), "trace_id").size(), 32u);
  EXPECT_NE(str(parse(submit("x", {"traceparent: 00-zz-00f067aa0ba902b7-01"})), "trace_id"), "zz");
  InferenceServer inference;
  auto relay = start_relay(inference, {}, {"--max-jobs", "3"});
  ASSERT_EQ(relay->wait_exit(20s), 0) << relay->log();
  ASSERT_TRUE(wait_until([&] { return !receiver.lines().empty(); }, 20s));
  // The model and the receiver each got the trace with a parent id of their own.
  std::smatch m;
  const std::string events = inference.events();
  ASSERT_TRUE(
      std::regex_search(events, m, std::regex("traceparent 00-" + trace + "-([0-9a-f]{16})-01")))
      << events;
  EXPECT_NE(m[1].str(), "00f067aa0ba902b7");
  auto hook = line_json(receiver.lines()[0]);
  const std::string hook_trace = str(hook, "traceparent");
  EXPECT_TRUE(hook_trace.starts_with("00-" + trace + "-")) << hook_trace;
  EXPECT_EQ(hook_trace.find("00f067aa0ba902b7"), std::string::npos);
  // The job's log lines name its trace, in the gateway and in the relay.
  ASSERT_TRUE(wait_until(
      [&] {
        return gateway_->log().find("\"msg\":\"job finished\"") != std::string::npos &&
               gateway_->log().find("\"trace_id\":\"" + trace + "\"") != std::string::npos;
      },
      10s))
      << gateway_->log();
  EXPECT_NE(relay->log().find("\"trace_id\":\"" + trace + "\""), std::string::npos);
  // Every relay line about the job names its trace.
  std::istringstream relay_lines(relay->log());
  int about_the_job = 0;
  for (std::string line; std::getline(relay_lines, line);)
    if (line.find("\"job_id\":\"" + id + "\"") != std::string::npos) {
      ++about_the_job;
      EXPECT_NE(line.find("\"trace_id\":\"" + trace + "\""), std::string::npos) << line;
    }
  EXPECT_GE(about_the_job, 1);
  // Histograms: stages and end to end by model, webhook deliveries; bounds as plain numbers.
  // (A batch's metrics follow its settle once the consumer's next read returns: within
  // kFollowUpWait, so they are waited for.)
  const std::vector<std::string> wanted{
      "relay_job_stage_duration_seconds_bucket{model=\"m1\",stage=\"inference\",le=\"30\"} 3",
      "relay_job_stage_duration_seconds_count{model=\"m1\",stage=\"queue_wait\"} 3",
      "relay_job_end_to_end_seconds_count{model=\"m1\",status=\"completed\"} 3",
      "relay_webhook_delivery_duration_seconds_count{outcome=\"delivered\"}"};
  std::string metrics;
  wait_until(
      [&] {
        metrics = http("GET", url("/metrics")).body;
        for (const auto& want : wanted)
          if (metrics.find(want) == std::string::npos) return false;
        return true;
      },
      10s);
  for (const auto& want : wanted)
    EXPECT_NE(metrics.find(want), std::string::npos) << want << "\n" << metrics;
  EXPECT_EQ(metrics.find("e+0"), std::string::npos) << metrics;
  // The job shows its end-to-end time with the relay's stages.
  EXPECT_TRUE(job(id).at("timings").as_object().contains("end_to_end"));
}

}  // namespace
}  // namespace relay::testing
