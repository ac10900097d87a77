-- `$/progress` routing: partial results of our own requests (contenox/ask) go to the
-- callback registered for their token; work-done progress goes to Neovim's default handler.
local M = {}

---@type table<string, fun(value: any)>
local partial = {}

local function key(client_id, token)
  return tostring(client_id) .. ':' .. tostring(token)
end

---@param client_id integer
---@param token string|integer
---@param cb fun(value: any)
function M.register(client_id, token, cb)
  partial[key(client_id, token)] = cb
end

function M.unregister(client_id, token)
  partial[key(client_id, token)] = nil
end

function M.handler(err, result, ctx, config)
  if type(result) == 'table' and result.token ~= nil then
    local cb = partial[key(ctx.client_id, result.token)]
    if cb then
      cb(result.value)
      return
    end
  end
  return vim.lsp.handlers['$/progress'](err, result, ctx, config)
end

return M
