"""The token stream, the figures of a token, the Next turn row and the Conversation transcript."""
