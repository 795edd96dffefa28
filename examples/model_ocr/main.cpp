// relay-model-ocr — an example inference server running a real model: Tesseract OCR (Debian's
// libtesseract with tesseract-ocr-eng). It speaks the relay's inference contract:
//
//   GET  /health   200 once the model is loaded
//   POST /ocr      multipart/form-data with a "file" part (an image: PNG, JPEG, TIFF, PNM...) and
//                  optional "language" (default eng); answers {"text", "confidence", "words"}.
//                  A multi-page TIFF is read page by page: the answer adds "pages" (each page's
//                  text, confidence and words), and after each page the model reports its
//                  progress to the relay (Relay-Progress-URL: "page 2 of 5").
//
// One request at a time (TessBaseAPI is not thread-safe): a relay sends one job at a time unless
// relay.concurrency is raised, and then the extra requests wait their turn here.

#include <leptonica/allheaders.h>
#include <tesseract/baseapi.h>

#include <CLI/CLI.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/signals.hpp"
#include "multipart/parser.hpp"
#include "progress_report.hpp"

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxImage = 32 << 20;

struct Model {
  std::mutex mu;
  tesseract::TessBaseAPI api;
  std::string language = "eng";
};

std::string json_error(const std::string& message) {
  return boost::json::serialize(boost::json::object{{"error", message}});
}

struct PixaFree {
  void operator()(Pixa* p) const { pixaDestroy(&p); }
};

// One page's text, mean confidence and word count (with m.mu held).
boost::json::object recognise_page(Model& m, Pix* page) {
  m.api.SetImage(page);
  char* text = m.api.GetUTF8Text();
  const int confidence = m.api.MeanTextConf();
  std::string out = text ? text : "";
  delete[] text;
  std::size_t words = 0;
  std::istringstream ss(out);
  for (std::string w; ss >> w;) ++words;
  return {{"text", out}, {"confidence", confidence}, {"words", words}};
}

// Runs OCR on an image held in memory: every page of a multi-page TIFF, reporting progress
// after each to progress_url (when the relay gave one).
std::pair<unsigned, std::string> recognise(Model& m, const std::string& image,
                                           const std::string& progress_url) {
  const auto* data = reinterpret_cast<const l_uint8*>(image.data());
  l_int32 format = IFF_UNKNOWN;
  findFileFormatBuffer(data, &format);
  std::unique_ptr<Pixa, PixaFree> pages;
  if (format == IFF_TIFF || format == IFF_TIFF_G4 || format == IFF_TIFF_ZIP ||
      format == IFF_TIFF_LZW || format == IFF_TIFF_PACKBITS || format == IFF_TIFF_G3 ||
      format == IFF_TIFF_RLE || format == IFF_TIFF_JPEG)
    pages.reset(pixaReadMemMultipageTiff(data, image.size()));
  if (!pages) {
    pages.reset(pixaCreate(1));
    Pix* pix = pixReadMem(data, image.size());
    if (!pix) return {400, json_error("the file is not an image Leptonica can read")};
    pixaAddPix(pages.get(), pix, L_INSERT);
  }
  const int n = pixaGetCount(pages.get());
  if (n == 0) return {400, json_error("the image has no pages")};
  std::lock_guard lock(m.mu);
  boost::json::array results;
  std::string text;
  std::int64_t words = 0, confidence = 0;
  for (int i = 0; i < n; ++i) {
    Pix* page = pixaGetPix(pages.get(), i, L_CLONE);
    auto r = recognise_page(m, page);
    pixDestroy(&page);
    text += r.at("text").as_string();
    words += r.at("words").to_number<std::int64_t>();
    confidence += r.at("confidence").to_number<std::int64_t>();
    results.push_back(std::move(r));
    if (!progress_url.empty())
      relay::examples::report_progress(
          progress_url, static_cast<double>(i + 1) / n,
          "page " + std::to_string(i + 1) + " of " + std::to_string(n));
  }
  boost::json::object out{{"text", text}, {"confidence", confidence / n}, {"words", words}};
  if (n > 1) out["pages"] = std::move(results);
  return {200, boost::json::serialize(out)};
}

void serve(tcp::socket sock, Model& model) {
  beast::flat_buffer buffer;
  beast::error_code ec;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxImage + 64 * 1024);
    http::read(sock, buffer, parser, ec);
    if (ec) return;
    auto& req = parser.get();
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    if (req.method() == http::verb::get && req.target() == "/health") {
      res.body() = R"({"status":"ok","model":"tesseract"})";
    } else if (req.method() == http::verb::post && req.target() == "/ocr") {
      auto boundary = relay::multipart::boundary_of(std::string(req[http::field::content_type]));
      std::string image;
      if (boundary) {
        try {
          // The request is already whole (string_body, within kMaxImage): one feed.
          struct FilePart final : relay::multipart::Handler {
            std::string& image;
            bool in_file = false;
            explicit FilePart(std::string& i) : image(i) {}
            void on_part(const relay::multipart::PartInfo& part) override {
              in_file = part.name == "file";
            }
            void on_data(std::string_view d) override {
              if (in_file) image.append(d);
            }
          } file(image);
          relay::multipart::Parser parser(*boundary, file);
          parser.feed(req.body());
          parser.finish();
        } catch (const std::exception& e) {
          image.clear();
          res.result(http::status::bad_request);
          res.body() = json_error(std::string("malformed multipart body: ") + e.what());
        }
      }
      if (res.result() == http::status::ok) {
        if (image.empty()) {
          res.result(http::status::bad_request);
          res.body() =
              json_error("expected multipart/form-data with a 'file' part holding an image");
        } else {
          auto [status, body] = recognise(model, image, std::string(req["Relay-Progress-URL"]));
          res.result(status);
          res.body() = std::move(body);
        }
      }
    } else {
      res.result(http::status::not_found);
      res.body() = json_error("not found");
    }
    res.prepare_payload();
    http::write(sock, res, ec);
    if (ec || !res.keep_alive()) return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:9000", language = "eng";
  CLI::App app{"relay-model-ocr: Tesseract OCR behind the relay's inference contract"};
  app.add_option("--listen", listen, "host:port");
  app.add_option("--language", language, "Tesseract language (installed traineddata)");
  CLI11_PARSE(app, argc, argv);
  relay::exit_on_shutdown_signals();
  Model model;
  // Loaded before listening: /health answers only once the model is ready (seed, "Startup").
  if (model.api.Init(nullptr, language.c_str()) != 0) {
    std::cerr << "relay-model-ocr: cannot load Tesseract language '" << language << "'\n";
    return 1;
  }
  auto colon = listen.rfind(':');
  asio::io_context io;
  tcp::acceptor acceptor(io);
  try {
    tcp::endpoint ep(asio::ip::make_address(listen.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(listen.substr(colon + 1))));
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen();
  } catch (const std::exception& e) {
    std::cerr << "relay-model-ocr: cannot listen on " << listen << ": " << e.what() << "\n";
    return 2;
  }
  std::cerr << "relay-model-ocr: Tesseract " << tesseract::TessBaseAPI::Version() << " ("
            << language << ") on " << listen << std::endl;
  for (;;) {
    tcp::socket sock(io);
    beast::error_code ec;
    acceptor.accept(sock, ec);
    if (ec) continue;
    std::thread([s = std::move(sock), &model]() mutable {
      try {
        serve(std::move(s), model);
      } catch (const std::exception&) {
      }
    }).detach();
  }
}
