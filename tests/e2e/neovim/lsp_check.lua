-- Headless Neovim 0.7 as a second real LSP client of the TL server: open a file, wait for the server's
-- diagnostics, request hover at a word, print one JSON object on stdout, quit.
-- Inputs (environment): TL_LSP_CMD (JSON list), TL_FILE (absolute path), TL_HOVER_WORD, TL_EXPECT_CODE,
-- TL_TIMEOUT_MS. Run it under `timeout`: a Lua error in a -u script would otherwise leave nvim running.

local function env(name, default)
  local value = os.getenv(name)
  if value == nil or value == "" then
    if default == nil then
      error("missing environment variable " .. name)
    end
    return default
  end
  return value
end

local function main()
  local cmd = vim.fn.json_decode(env("TL_LSP_CMD"))
  local file = env("TL_FILE")
  local word = env("TL_HOVER_WORD", "Softmax")
  local expect_code = env("TL_EXPECT_CODE", "")
  local timeout = tonumber(env("TL_TIMEOUT_MS", "30000"))
  local out = { filetype = nil, diagnostics = {}, hover = nil, timings = {} }
  local started = vim.loop.hrtime()
  local function ms()
    return math.floor((vim.loop.hrtime() - started) / 1e6)
  end

  -- The runtime maps *.tl to `teal`; this autocmd is defined first, and `setf teal` never overrides it.
  vim.cmd([[autocmd BufRead,BufNewFile *.tl setlocal filetype=tl]])

  local exited = nil
  local client_id = vim.lsp.start_client({
    name = "tl",
    cmd = cmd,
    root_dir = vim.fn.fnamemodify(file, ":h"),
    -- Answers the server's workspace/configuration requests for section `tl`.
    settings = { tl = { onSave = "check" } },
    on_exit = function(code, signal)
      exited = { code = code, signal = signal }
    end,
  })
  if client_id == nil then
    error("vim.lsp.start_client returned nil for " .. vim.inspect(cmd))
  end

  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  out.filetype = vim.bo[bufnr].filetype
  vim.lsp.buf_attach_client(bufnr, client_id)

  local initialized = vim.wait(timeout, function()
    local client = vim.lsp.get_client_by_id(client_id)
    return exited ~= nil or (client ~= nil and client.initialized)
  end, 20)
  if exited ~= nil or not initialized then
    error("server did not initialize: " .. vim.inspect(exited))
  end
  out.timings.initialized_ms = ms()

  local got = vim.wait(timeout, function()
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code)
      if expect_code == "" or code == expect_code then
        return true
      end
    end
    return false
  end, 20)
  out.timings.diagnostics_ms = ms()
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(out.diagnostics, {
      lnum = d.lnum,
      col = d.col,
      severity = d.severity,
      message = d.message,
      source = d.source,
      code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code),
    })
  end
  out.diagnostics_arrived = got

  -- Hover at the first occurrence of the word (0-based line and UTF-16 column; the line is ASCII).
  local line_nr, col = nil, nil
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    local s = line:find("%f[%w_]" .. word .. "%f[^%w_]")
    if s ~= nil then
      line_nr, col = i - 1, s - 1
      break
    end
  end
  if line_nr == nil then
    error("word " .. word .. " not in " .. file)
  end
  local params = { textDocument = vim.lsp.util.make_text_document_params(bufnr), position = { line = line_nr, character = col } }
  local responses, err = vim.lsp.buf_request_sync(bufnr, "textDocument/hover", params, timeout)
  if responses == nil then
    error("hover request failed: " .. tostring(err))
  end
  for _, response in pairs(responses) do
    if response.error ~= nil then
      error("hover error: " .. vim.inspect(response.error))
    end
    out.hover = response.result
  end
  out.hover_position = params.position
  out.timings.hover_ms = ms()

  vim.lsp.stop_client(client_id)
  vim.wait(2000, function()
    return exited ~= nil
  end, 20)
  out.exit = exited
  io.stdout:write(vim.fn.json_encode(out) .. "\n")
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  io.stderr:write("lsp_check.lua failed: " .. tostring(err) .. "\n")
  vim.cmd("cquit 1")
end
vim.cmd("qall!")
